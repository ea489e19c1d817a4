#include "libs/planner/ring_membership.h"

#include <stdexcept>

namespace ravnest::planner {

std::map<int, std::vector<config::RingMembership>> ring_views(
    const std::vector<config::PlanRing>& rings, const std::map<int, RingMemberInfo>& members,
    const std::set<int>& live_clusters) {
  std::map<int, std::vector<config::RingMembership>> views;
  for (const auto& ring : rings) {
    std::vector<config::RingPeer> live;
    std::set<int> clusters_seen;
    for (int node : ring.nodes) {
      auto it = members.find(node);
      if (it == members.end()) {
        throw std::invalid_argument("ring " + std::to_string(ring.id) + ": node_" +
                                    std::to_string(node) + " is not in the plan's nodes");
      }
      if (!clusters_seen.insert(it->second.cluster).second) {
        throw std::invalid_argument("ring " + std::to_string(ring.id) + ": node_" +
                                    std::to_string(node) + " is a second member of cluster " +
                                    std::to_string(it->second.cluster));
      }
      if (live_clusters.count(it->second.cluster) == 0) continue;
      live.push_back({node, it->second.cluster, it->second.address});
    }
    const int size = static_cast<int>(live.size());
    for (int position = 0; position < size; ++position) {
      config::RingMembership view;
      view.id = ring.id;
      view.size = size;
      view.position = position;
      view.next = live[(position + 1) % size];
      view.prev = live[(position + size - 1) % size];
      views[live[position].node].push_back(std::move(view));
    }
  }
  return views;
}

}  // namespace ravnest::planner
