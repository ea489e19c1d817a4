#include "libs/tracker/elastic_choice.h"

#include <algorithm>
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

  std::set<int> dropped;
  std::vector<ElasticChange> changes;
  for (const std::string& name : lost_sorted) {
    auto planned = std::find_if(plan.begin(), plan.end(),
                                [&](const PlannedNode& n) { return n.name == name; });
    if (planned == plan.end()) continue;  // not ours: nothing to decide
    if (dropped.count(planned->cluster)) continue;
    const Member* best = nullptr;
    for (const auto& [candidate, member] : pool) {  // std::map: name order, so ties go to the smallest
      if (taken.count(candidate)) continue;
      if (member.registration.hardware.memory_bytes < planned->need_bytes) continue;
      if (!best || member.registration.hardware.memory_bytes >
                       best->registration.hardware.memory_bytes)
        best = &member;
    }
    ElasticChange change;
    change.lost = name;
    change.cluster = planned->cluster;
    if (best) {
      change.kind = ElasticChange::Kind::replace;
      change.replacement = best->registration.name;
      taken.insert(change.replacement);
    } else {
      change.kind = ElasticChange::Kind::drop_cluster;
      dropped.insert(planned->cluster);
    }
    changes.push_back(change);
  }
  return changes;
}

}  // namespace ravnest::tracker
