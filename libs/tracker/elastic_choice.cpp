#include "libs/tracker/elastic_choice.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace ravnest::tracker {

std::string ElasticChange::line(const std::string& why) const {
  const std::string head = "elastic: " + lost + " lost" + (why.empty() ? "" : " (" + why + ")");
  if (kind == Kind::replace)
    return head + "; " + replacement + " takes its place in cluster " + std::to_string(cluster);
  return head + "; no idle node fits, cluster " + std::to_string(cluster) + " dropped";
}

std::vector<ElasticChange> choose_elastic_changes(const std::vector<PlannedNode>& plan,
                                                  const std::vector<std::string>& lost,
                                                  const std::map<std::string, Member>& pool) {
  std::set<std::string> taken;
  for (const PlannedNode& node : plan) taken.insert(node.name);
  std::vector<std::string> lost_sorted(lost.begin(), lost.end());
  std::sort(lost_sorted.begin(), lost_sorted.end());
  lost_sorted.erase(std::unique(lost_sorted.begin(), lost_sorted.end()), lost_sorted.end());

  // The lost nodes of each cluster, clusters in the order of their first lost name.
  std::vector<std::pair<int, std::vector<const PlannedNode*>>> by_cluster;
  for (const std::string& name : lost_sorted) {
    auto planned = std::find_if(plan.begin(), plan.end(),
                                [&](const PlannedNode& n) { return n.name == name; });
    if (planned == plan.end()) continue;  // not ours: nothing to decide
    auto cluster = std::find_if(by_cluster.begin(), by_cluster.end(),
                                [&](const auto& c) { return c.first == planned->cluster; });
    if (cluster == by_cluster.end()) {
      by_cluster.push_back({planned->cluster, {}});
      cluster = std::prev(by_cluster.end());
    }
    cluster->second.push_back(&*planned);
  }

  std::vector<ElasticChange> changes;
  for (const auto& [cluster, nodes] : by_cluster) {
    // Every lost node of the cluster gets an idle node, or none does: a cluster with a stage
    // still missing cannot rejoin, and a spare given to it would be lost to the others.
    std::vector<ElasticChange> replaced;
    const PlannedNode* unfit = nullptr;
    for (const PlannedNode* planned : nodes) {
      const Member* best = nullptr;
      for (const auto& [candidate, member] : pool) {  // std::map: name order, ties to the smallest
        if (taken.count(candidate)) continue;
        if (member.registration.hardware.memory_bytes < planned->need_bytes) continue;
        if (!best || member.registration.hardware.memory_bytes >
                         best->registration.hardware.memory_bytes)
          best = &member;
      }
      if (!best) {
        unfit = planned;
        break;
      }
      ElasticChange change;
      change.lost = planned->name;
      change.cluster = cluster;
      change.replacement = best->registration.name;
      taken.insert(change.replacement);
      replaced.push_back(change);
    }
    if (!unfit) {
      changes.insert(changes.end(), replaced.begin(), replaced.end());
      continue;
    }
    for (const auto& change : replaced) taken.erase(change.replacement);
    ElasticChange drop;
    drop.kind = ElasticChange::Kind::drop_cluster;
    drop.lost = unfit->name;
    drop.cluster = cluster;
    changes.push_back(drop);
  }
  return changes;
}

std::vector<std::string> choose_join(const std::vector<uint64_t>& stage_needs,
                                     const std::map<std::string, Member>& candidates) {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  for (const uint64_t need : stage_needs) {
    const Member* best = nullptr;
    for (const auto& [name, member] : candidates) {  // name order: ties go to the smallest
      if (taken.count(name) || member.registration.hardware.memory_bytes < need) continue;
      if (!best || member.registration.hardware.memory_bytes >
                       best->registration.hardware.memory_bytes)
        best = &member;
    }
    if (!best) return {};
    chosen.push_back(best->registration.name);
    taken.insert(best->registration.name);
  }
  return chosen;
}

std::string join_line(const std::vector<std::string>& names, int cluster) {
  std::string who;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) who += i + 1 == names.size() ? " and " : ", ";
    who += names[i];
  }
  return "elastic: " + who + " registered; " + (names.size() == 1 ? "it joins" : "they join") +
         " as cluster " + std::to_string(cluster) + " at the next update boundary";
}

}  // namespace ravnest::tracker
