#include "libs/planner/rings.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace ravnest::planner {

std::vector<Ring> form_rings(const std::vector<HeldParameters>& holders) {
  // Cluster order: ascending cluster number.
  std::map<int, std::unordered_map<std::string, int>> holder_of;  // cluster -> name -> node
  for (const auto& held : holders) {
    auto& names = holder_of[held.cluster];
    for (const auto& name : held.parameters) names.emplace(name, held.node_id);  // first wins
  }
  if (holder_of.size() < 2) return {};

  std::vector<int> clusters;
  for (const auto& entry : holder_of) clusters.push_back(entry.first);
  const int first_cluster = clusters.front();

  // Parameters in the first cluster's pipeline order (holders are listed in pipeline order).
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& held : holders) {
    if (held.cluster != first_cluster) continue;
    for (const auto& name : held.parameters) {
      if (seen.insert(name).second) names.push_back(name);
    }
  }
  for (const auto& [cluster, held] : holder_of) {
    for (const auto& entry : held) {
      if (!seen.count(entry.first)) {
        throw std::invalid_argument("parameter \"" + entry.first + "\" is held in cluster " +
                                    std::to_string(cluster) + " but by no node of cluster " +
                                    std::to_string(first_cluster));
      }
    }
  }

  std::vector<Ring> rings;
  std::map<std::vector<int>, size_t> ring_of;  // holder list -> index into rings
  for (const auto& name : names) {
    std::vector<int> nodes;
    for (int cluster : clusters) {
      const auto& held = holder_of[cluster];
      const auto it = held.find(name);
      if (it == held.end()) {
        throw std::invalid_argument("parameter \"" + name + "\" is held by no node of cluster " +
                                    std::to_string(cluster));
      }
      nodes.push_back(it->second);
    }
    auto [it, added] = ring_of.emplace(nodes, rings.size());
    if (added) {
      Ring ring;
      ring.id = static_cast<int>(rings.size());
      ring.nodes = nodes;
      rings.push_back(std::move(ring));
    }
    rings[it->second].parameters.push_back(name);
  }
  return rings;
}

std::vector<config::PlanRing> assign_rings(std::vector<config::NodeMetadata>& nodes) {
  std::vector<planner::HeldParameters> holders;
  for (const auto& meta : nodes) holders.push_back({meta.node_id, meta.cluster, meta.parameters});
  std::map<int, config::NodeMetadata*> by_id;
  for (auto& meta : nodes) by_id[meta.node_id] = &meta;
  std::vector<config::PlanRing> summary;
  for (const auto& ring : form_rings(holders)) {
    summary.push_back({ring.id, ring.parameters, ring.nodes});
    // Each member holds only its neighbours: O(1) per member, not O(clusters) (a copy of every
    // member in each node's ring made 10,000 single-node clusters take gigabytes).
    auto peer = [&](size_t k) {
      const auto& meta = *by_id.at(ring.nodes[k % ring.nodes.size()]);
      return config::RingPeer{meta.node_id, meta.cluster, meta.address};
    };
    const size_t n = ring.nodes.size();
    for (size_t k = 0; k < n; ++k) {
      config::RingMembership membership;
      membership.id = ring.id;
      membership.parameters = ring.parameters;
      membership.size = static_cast<int>(n);
      membership.position = static_cast<int>(k);
      membership.next = peer(k + 1);
      membership.prev = peer(k + n - 1);
      by_id.at(ring.nodes[k])->rings.push_back(std::move(membership));
    }
  }
  return summary;
}

namespace {

// This node's place among `members` (nodes of its own cluster, in ring order) and its two
// neighbours, with their addresses from the cluster's.
void place_in_ring(const config::NodeMetadata& node, const std::vector<int>& members,
                   config::RingMembership* ring) {
  const size_t n = members.size();
  ring->size = static_cast<int>(n);
  for (size_t k = 0; k < n; ++k) {
    if (members[k] == node.node_id) ring->position = static_cast<int>(k);
  }
  if (n == 0) return;
  auto peer = [&](size_t k) {
    const int id = members[k % n];
    auto address = node.addresses.find(id);
    return config::RingPeer{id, node.cluster,
                            address == node.addresses.end() ? std::string() : address->second};
  };
  ring->next = peer(static_cast<size_t>(ring->position) + 1);
  ring->prev = peer(static_cast<size_t>(ring->position) + n - 1);
}

}  // namespace

std::vector<config::RingMembership> shared_parameter_rings(const config::NodeMetadata& node) {
  auto canonical = [&](const std::string& name) {
    auto it = node.tied_parameters.find(name);
    return it == node.tied_parameters.end() ? name : it->second;
  };
  std::map<std::vector<int>, std::set<std::string>> groups;  // holders -> canonical names
  for (const auto& [name, holders] : node.shared_parameters) {
    std::vector<int> sorted = holders;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    if (sorted.size() < 2) continue;
    groups[sorted].insert(canonical(name));
  }
  std::vector<config::RingMembership> rings;
  for (const auto& [holders, names] : groups) {
    config::RingMembership ring;
    uint32_t hash = 2166136261u;  // FNV-1a over the holders
    for (int id : holders) {
      for (int shift = 0; shift < 32; shift += 8) {
        hash = (hash ^ ((static_cast<uint32_t>(id) >> shift) & 0xffu)) * 16777619u;
      }
    }
    ring.id = static_cast<int>((1u << 30) | (hash & ((1u << 30) - 1)));
    ring.parameters.assign(names.begin(), names.end());
    place_in_ring(node, holders, &ring);
    rings.push_back(std::move(ring));
  }
  return rings;
}

config::RingMembership cluster_stage_ring(const config::NodeMetadata& node) {
  config::RingMembership ring;
  uint32_t hash = 2166136261u;  // FNV-1a over the members, as the shared rings'
  for (int id : node.pipeline) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash = (hash ^ ((static_cast<uint32_t>(id) >> shift) & 0xffu)) * 16777619u;
    }
  }
  ring.id = static_cast<int>((1u << 29) | (hash & ((1u << 29) - 1)));
  place_in_ring(node, node.pipeline, &ring);
  return ring;
}

}  // namespace ravnest::planner
