// What a change of the node pool does to a plan (`ravnest pool add/remove`, docs/planner.md#
// pools-that-change): pure decisions from the plan's node metadata and the pool after the change,
// unit-tested without files or processes.
//
// A node added becomes a spare: the plan does not change. The decision says whether the spares
// (pool nodes the plan does not use) could hold one more copy of an existing cluster's stages, so
// that the user knows a --replan would gain a cluster. A node removed that the plan does not use
// changes nothing; one the plan uses is replaced by the spare that best takes its stage (enough
// memory for it, on a GPU plan the smaller of RAM and GPU memory; then the most bandwidth, then
// the lowest id): its cluster keeps its cut, the
// other clusters' stages stay as they are. With no spare that fits, the plan needs --replan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::config {

// Bytes a node needs to take this stage: its measured peak x the planner's margin, else the
// cost model's estimate (which has the margin in it).
double stage_need_bytes(const NodeMetadata& node, double margin);

// What a node offers a stage: its RAM, or on a GPU plan the smaller of its RAM and its GPU's.
double offered_bytes(const NodeConfig& node, bool on_gpu);

// The plan's nodes whose address the pool now gives otherwise (the pool was made again on other
// ports, as `ravnest local` does when restarted): one "node_0 at 127.0.0.1:56871, the pool now
// 127.0.0.1:35933" each, by id. Nodes the pool no longer lists are not counted (a removal is
// pool remove's business).
std::vector<std::string> moved_nodes(const std::vector<NodeMetadata>& plan_nodes,
                                     const std::vector<NodeConfig>& pool);

// Pool nodes the plan does not use, by id.
std::vector<NodeConfig> spares(const std::vector<NodeMetadata>& plan_nodes,
                               const std::vector<NodeConfig>& pool);

struct AddedNodeDecision {
  // A cluster whose stages the spares could hold, one spare a stage (their ids, in the cluster's
  // pipeline order), so that --replan can plan one more; empty when they cannot.
  std::optional<int> like_cluster;
  std::vector<int> could_form;
};
AddedNodeDecision decide_added(const std::vector<NodeMetadata>& plan_nodes,
                               const std::vector<NodeConfig>& pool_after, double margin);

struct RemovedNodeDecision {
  bool in_plan = false;         // false: a spare went, nothing to replan
  int cluster = -1;
  std::optional<int> spare;     // the spare that takes its stage
  double need_bytes = 0;        // what its stage needs
  double largest_spare_bytes = 0;  // the most RAM a spare offers (0: none)
};
RemovedNodeDecision decide_removed(const std::vector<NodeMetadata>& plan_nodes,
                                   const std::vector<NodeConfig>& pool_after, int removed_id,
                                   double margin);

}  // namespace ravnest::config
