#include "libs/membership/ring_membership.h"

#include <algorithm>
#include <stdexcept>

namespace ravnest::membership {

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

std::map<int, uint64_t> rounds_to_run_from(
    const std::map<int, std::vector<config::RingMembership>>& views,
    const std::map<int, std::map<int, uint64_t>>& completed) {
  std::map<int, uint64_t> from;
  std::set<int> unknown;  // rings with a member that did not say
  for (const auto& [node, rings] : views) {
    const auto said = completed.find(node);
    for (const auto& view : rings) {
      const std::map<int, uint64_t>* rounds = said == completed.end() ? nullptr : &said->second;
      const auto it = rounds ? rounds->find(view.id) : std::map<int, uint64_t>::const_iterator{};
      if (rounds == nullptr || it == rounds->end()) {
        unknown.insert(view.id);
        continue;
      }
      auto [at, fresh] = from.emplace(view.id, it->second);
      if (!fresh) at->second = std::min(at->second, it->second);
    }
  }
  for (int ring : unknown) from.erase(ring);
  return from;
}

std::vector<config::PlanRing> rings_of_nodes(const std::vector<config::NodeMetadata>& nodes) {
  std::map<int, std::map<int, int>> by_ring;  // ring id -> position -> node
  std::map<int, int> sizes;
  for (const auto& node : nodes) {
    for (const auto& ring : node.rings) {
      sizes[ring.id] = ring.size;
      if (!by_ring[ring.id].emplace(ring.position, node.node_id).second) {
        throw std::invalid_argument("ring " + std::to_string(ring.id) + ": node_" +
                                    std::to_string(node.node_id) + " and node_" +
                                    std::to_string(by_ring[ring.id][ring.position]) +
                                    " both at position " + std::to_string(ring.position));
      }
    }
  }
  std::vector<config::PlanRing> rings;
  for (const auto& [id, members] : by_ring) {
    config::PlanRing ring;
    ring.id = id;
    for (const auto& [position, node] : members) {
      if (position != static_cast<int>(ring.nodes.size())) break;
      ring.nodes.push_back(node);
    }
    if (static_cast<int>(ring.nodes.size()) != sizes[id]) {
      throw std::invalid_argument("ring " + std::to_string(id) + ": " +
                                  std::to_string(sizes[id]) + " members, but the node files place " +
                                  std::to_string(members.size()) + " of them without a gap at " +
                                  std::to_string(ring.nodes.size()));
    }
    rings.push_back(std::move(ring));
  }
  return rings;
}

std::map<int, RingMemberInfo> ring_members_of(const std::vector<config::NodeMetadata>& nodes) {
  std::map<int, RingMemberInfo> members;
  for (const auto& node : nodes) members[node.node_id] = {node.cluster, node.address};
  return members;
}

RoundToRun round_to_run(int ring, uint64_t round, uint64_t from,
                        std::optional<uint64_t> kept_round) {
  if (from == round) return RoundToRun::kThisRound;
  const std::string where = "ring " + std::to_string(ring) + ": the requester runs it from round " +
                            std::to_string(from) + ", but this node is at round " +
                            std::to_string(round);
  if (round == 0 || from != round - 1) {
    throw std::runtime_error(where + " (members more than one round apart, or a stale count)");
  }
  if (!kept_round || *kept_round != from) {
    throw std::runtime_error(where + " and did not keep the inputs of round " +
                             std::to_string(from));
  }
  return RoundToRun::kPreviousFirst;
}

}  // namespace ravnest::membership
