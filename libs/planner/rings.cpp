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
    for (size_t k = 0; k < holders.size(); ++k) {
      auto address = node.addresses.find(holders[k]);
      ring.peers.push_back({holders[k], node.cluster,
                            address == node.addresses.end() ? std::string() : address->second});
      if (holders[k] == node.node_id) ring.position = static_cast<int>(k);
    }
    const size_t n = holders.size();
    ring.next_node = holders[(ring.position + 1) % n];
    ring.prev_node = holders[(ring.position + n - 1) % n];
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
  for (size_t k = 0; k < node.pipeline.size(); ++k) {
    auto address = node.addresses.find(node.pipeline[k]);
    ring.peers.push_back({node.pipeline[k], node.cluster,
                          address == node.addresses.end() ? std::string() : address->second});
    if (node.pipeline[k] == node.node_id) ring.position = static_cast<int>(k);
  }
  const size_t n = node.pipeline.size();
  if (n > 0) {
    ring.next_node = node.pipeline[(ring.position + 1) % n];
    ring.prev_node = node.pipeline[(ring.position + n - 1) % n];
  }
  return ring;
}

}  // namespace ravnest::planner
