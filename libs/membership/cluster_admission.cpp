#include "libs/membership/cluster_admission.h"

#include <algorithm>

namespace ravnest::membership {

using namespace ravnest::config;
namespace {

std::map<int, std::map<int, const NodeMetadata*>> by_cluster(const std::vector<NodeMetadata>& nodes) {
  std::map<int, std::map<int, const NodeMetadata*>> clusters;  // cluster -> position -> node
  for (const auto& m : nodes) clusters[m.cluster][m.position] = &m;
  return clusters;
}

}  // namespace

ClusterAdmission admit_clusters(const std::vector<NodeMetadata>& running,
                                const std::vector<NodeMetadata>& now,
                                const std::set<int>& dropped, const std::set<int>& back) {
  ClusterAdmission admission;
  const auto before = by_cluster(running);
  const auto after = by_cluster(now);
  for (const auto& [c, nodes] : before) {
    if (c < 0) continue;  // no cluster: a parameter server's node
    if (!after.count(c)) {
      admission.wait = "plan.json no longer names cluster " + std::to_string(c) +
                       " of the running job; a running job takes in clusters, it loses none";
      return admission;
    }
  }
  for (const auto& [c, nodes] : after) {
    if (c < 0) continue;
    auto it = before.find(c);
    if (it == before.end()) {
      admission.joining.push_back(c);
      continue;
    }
    if (!dropped.count(c)) continue;
    std::set<int> was, is;
    for (const auto& [p, m] : it->second) was.insert(m->node_id);
    for (const auto& [p, m] : nodes) is.insert(m->node_id);
    if (was != is || back.count(c)) admission.rejoining.push_back(c);
  }
  if (admission.empty()) return admission;

  std::vector<int> taken = admission.rejoining;
  taken.insert(taken.end(), admission.joining.begin(), admission.joining.end());
  for (int d : dropped) {
    if (!std::count(admission.rejoining.begin(), admission.rejoining.end(), d)) {
      admission.staying_dropped.push_back(d);
    }
  }
  for (int c : taken) {
    const auto& target = after.at(c);
    for (const auto& [s, nodes] : before) {
      if (s < 0 || dropped.count(s) || nodes.size() != target.size()) continue;
      bool same = true;
      for (const auto& [p, m] : target) {
        auto at = nodes.find(p);
        if (at == nodes.end() || at->second->stage_sha256 != m->stage_sha256) {
          same = false;
          break;
        }
      }
      if (same) {
        admission.source[c] = s;
        break;
      }
    }
    if (admission.source.count(c)) continue;
    for (const auto& [s, nodes] : before) {
      if (s < 0 || dropped.count(s)) continue;
      admission.source[c] = s;
      admission.recut.insert(c);
      break;
    }
    if (!admission.source.count(c)) {
      admission.wait = "no cluster trains: nothing to start cluster " + std::to_string(c) + " from";
      return admission;
    }
  }
  return admission;
}

}  // namespace ravnest::membership
