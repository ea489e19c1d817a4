#include "libs/config/pool/pool_change.h"

#include <algorithm>
#include <map>
#include <set>

namespace ravnest::config {

double stage_need_bytes(const NodeMetadata& node, double margin) {
  const auto& e = node.estimates;
  if (e.peak_memory_bytes > 0) return static_cast<double>(e.peak_memory_bytes) * margin;
  return e.memory_bytes;
}

double offered_bytes(const NodeConfig& node, bool on_gpu) {
  return on_gpu ? std::min(node.ram_bytes(), node.gpu_memory_bytes()) : node.ram_bytes();
}

std::vector<std::string> moved_nodes(const std::vector<NodeMetadata>& plan_nodes,
                                     const std::vector<NodeConfig>& pool) {
  std::map<int, const NodeConfig*> by_id;
  for (const auto& node : pool) by_id[node.id] = &node;
  std::vector<const NodeMetadata*> sorted;
  for (const auto& node : plan_nodes) sorted.push_back(&node);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->node_id < b->node_id; });
  std::vector<std::string> out;
  for (const auto* node : sorted) {
    auto it = by_id.find(node->node_id);
    if (it == by_id.end() || it->second->address == node->address) continue;
    out.push_back(node->name + " at " + node->address + ", the pool now " + it->second->address);
  }
  return out;
}

std::vector<NodeConfig> spares(const std::vector<NodeMetadata>& plan_nodes,
                               const std::vector<NodeConfig>& pool) {
  std::set<int> used;
  for (const auto& node : plan_nodes) used.insert(node.node_id);
  std::vector<NodeConfig> out;
  for (const auto& node : pool) {
    if (!used.count(node.id)) out.push_back(node);
  }
  return out;
}

AddedNodeDecision decide_added(const std::vector<NodeMetadata>& plan_nodes,
                               const std::vector<NodeConfig>& pool_after, double margin) {
  AddedNodeDecision decision;
  std::map<int, std::vector<const NodeMetadata*>> clusters;
  for (const auto& node : plan_nodes) clusters[node.cluster].push_back(&node);
  const auto free = spares(plan_nodes, pool_after);
  for (auto& [id, stages] : clusters) {
    if (stages.size() > free.size()) continue;
    std::sort(stages.begin(), stages.end(),
              [](const NodeMetadata* a, const NodeMetadata* b) { return a->position < b->position; });
    // The neediest stage first takes the smallest spare that holds it: the best fit leaves the
    // larger spares to the stages that need them.
    std::vector<const NodeMetadata*> by_need = stages;
    std::stable_sort(by_need.begin(), by_need.end(), [&](const NodeMetadata* a, const NodeMetadata* b) {
      return stage_need_bytes(*a, margin) > stage_need_bytes(*b, margin);
    });
    const bool on_gpu = stages.front()->estimates.node_gpu_memory_bytes > 0;
    std::vector<bool> taken(free.size(), false);
    std::map<int, int> spare_of;  // position -> spare id
    bool fits = true;
    for (const NodeMetadata* stage : by_need) {
      const double need = stage_need_bytes(*stage, margin);
      int best = -1;
      for (size_t i = 0; i < free.size(); ++i) {
        if (taken[i] || offered_bytes(free[i], on_gpu) < need) continue;
        if (best < 0 || offered_bytes(free[i], on_gpu) < offered_bytes(free[best], on_gpu)) {
          best = static_cast<int>(i);
        }
      }
      if (best < 0) {
        fits = false;
        break;
      }
      taken[best] = true;
      spare_of[stage->position] = free[best].id;
    }
    if (!fits) continue;
    decision.like_cluster = id;
    for (const auto& [position, spare] : spare_of) decision.could_form.push_back(spare);
    break;
  }
  return decision;
}

RemovedNodeDecision decide_removed(const std::vector<NodeMetadata>& plan_nodes,
                                   const std::vector<NodeConfig>& pool_after, int removed_id,
                                   double margin) {
  RemovedNodeDecision decision;
  const auto removed = std::find_if(plan_nodes.begin(), plan_nodes.end(),
                                    [&](const NodeMetadata& n) { return n.node_id == removed_id; });
  if (removed == plan_nodes.end()) return decision;
  decision.in_plan = true;
  decision.cluster = removed->cluster;
  decision.need_bytes = stage_need_bytes(*removed, margin);
  const auto free = spares(plan_nodes, pool_after);
  const NodeConfig* best = nullptr;
  // A plan for a GPU recorded the card each node declared: a spare offers the smaller of its RAM
  // and its GPU's memory, as clusterize planned (docs/planner.md#memory-on-a-gpu).
  const bool on_gpu = removed->estimates.node_gpu_memory_bytes > 0;
  for (const auto& spare : free) {
    if (spare.id == removed_id) continue;
    const double offered = offered_bytes(spare, on_gpu);
    decision.largest_spare_bytes = std::max(decision.largest_spare_bytes, offered);
    if (offered < decision.need_bytes) continue;
    if (!best || spare.bandwidth_mbps > best->bandwidth_mbps) best = &spare;
  }
  if (best) decision.spare = best->id;
  return decision;
}

}  // namespace ravnest::config
