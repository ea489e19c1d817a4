// `ravnest replace OLD --with SPARE`: the plan with a spare node from the pool in the slot of a
// node that is gone. The spare takes the slot whole (cluster, position, role, stage, rings);
// every node that named the old one (its cluster's pipeline and addresses, inputs and outputs,
// neighbours, holders of shared parameters, the random chain, ring peers) names the spare
// instead. Cluster ids do not change, nor does anything else: the plan's checkpoints belong to
// its slots, so a job resumes across the replacement (docs/faults.md). Pure: no file is touched.
#pragma once

#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::config {

// Every mention of node `from` in `node` (pipeline, addresses, inputs, outputs, neighbours,
// shared-parameter holders, random chain, ring peers) as `to` at `address`, the node's own id
// left alone. True when anything changed. Also membership::join_cluster's
// (libs/membership/cluster_join.h).
bool rename_node_mentions(NodeMetadata& node, int from, int to, const std::string& address);

// Rewrites `nodes` in place. Returns the ids (after the replacement) of the nodes whose metadata
// changed, the spare first. Throws std::runtime_error naming the node: `old_id` is not in the
// plan, or `spare` already is.
std::vector<int> replace_node(std::vector<NodeMetadata>& nodes, int old_id, const NodeConfig& spare);

// plan.json's text with `old_id` replaced by `new_id` in its clusters and rings.
std::string replace_node_in_plan_json(const std::string& plan_json, int old_id, int new_id);

}  // namespace ravnest::config
