// ParameterServerPlanWriter: a parameter-server plan into files. Every node (server, worker,
// evaluator) gets the whole model as its one stage; servers keep only their shard of it
// (docs/parameter-server.md). Writes DIR/stages/, DIR/nodes/ and DIR/plan.json, whose
// "parameter_server" block names the servers and the evaluator (docs/node-metadata.md#plan).
#pragma once

#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/sparse_tables.h"
#include "libs/graph/stage_writer.h"
#include "libs/planner/ps_plan.h"

namespace ravnest::graph {

// The model's state (parameters, then buffers, in state-dict order) with each tensor's bytes.
// Throws std::invalid_argument when two names are the same tensor (tied weights), which a
// server's shard cannot hold twice.
std::vector<planner::StateTensor> state_tensors_for_servers(const CutModel& model);

// Returns the nodes' metadata: workers by index, then servers, then the evaluator.
std::vector<config::NodeMetadata> write_parameter_server_plan(
    const CutModel& model, const planner::PsPoolPlan& plan,
    const std::vector<config::NodeConfig>& pool, const PlanHeader& header, const std::string& dir);

// A hybrid plan (`plan`'s shards are the tables): the servers hold the whole model and serve
// their tables; the workers (trainers) hold the model with each table's weight an empty
// placeholder of its dtype ([0, dim...]), train the rest data-parallel over rings, and look up
// rows. plan.json says "mode": "hybrid".
std::vector<config::NodeMetadata> write_hybrid_plan(
    const ModelGraph& model, const planner::PsPoolPlan& plan,
    const std::vector<SparseTableUse>& tables, const std::vector<config::NodeConfig>& pool,
    const PlanHeader& header, const std::string& dir);

}  // namespace ravnest::graph
