// Parameter-server planning: which nodes of the pool serve the model (and which shard of its
// state each holds), which train as workers and which scores as the evaluator, with the per-step
// time the plan is chosen by. Pure: plain data in, plain data out. docs/planner.md#parameter-servers
// has the cost model; docs/parameter-server.md the roles.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/model_profile.h"

namespace ravnest::planner {

// One tensor of the model's state (a parameter or a buffer), by state-dict name, in model order.
struct StateTensor {
  std::string name;
  int64_t bytes = 0;
};

struct PsRequest {
  int servers = 1;         // K >= 1
  bool evaluator = false;  // one node of the pool scores the servers' weights
};

struct PsServerPlan {
  int node_id = 0;
  std::vector<std::string> tensors;  // its shard, in model order
  int64_t shard_bytes = 0;
  double memory_bytes = 0;        // the whole model it loads, plus the shard's gradient and Adam state
  double exchange_seconds = 0;    // receiving every worker's shard gradients and sending the weights
};

struct PsWorkerPlan {
  int node_id = 0;
  StageCost cost;                 // the whole model on this node (compute, training memory)
  double exchange_seconds = 0;    // pushing its gradients and receiving the weights
};

struct PsPoolPlan {
  std::vector<PsServerPlan> servers;  // by node id
  std::vector<PsWorkerPlan> workers;  // worker i trains on shard i of the data; by node id
  std::optional<int> evaluator;
  double evaluator_memory_bytes = 0;
  // One synchronous update: the slowest worker's compute, then the slowest exchange (a server's
  // link carries every worker's traffic; a worker's its own). samples/s = workers * batch / step.
  double step_seconds = 0;
  double samples_per_second = 0;
  std::vector<int> unplaced_nodes;  // too little memory to train, serve or score; by id
};

// Servers: the K nodes with the most bandwidth among those that can hold a server's memory (ties:
// fewer gflops, then the lower id). Shards: tensors taken largest first, each to the server whose
// exchange would end earliest with it (so each server's traffic is proportional to its
// bandwidth: 1/K of it when the links are alike). Evaluator: of the rest, the node with the fewest
// gflops that can hold the model for inference. Workers: every remaining node that can train the
// whole model. Throws PoolTooSmall (naming the counts) when no worker is left, std::invalid_argument
// for K < 1 or a state without tensors.
PsPoolPlan plan_parameter_servers(const ModelProfile& profile, const std::vector<StateTensor>& state,
                                  const std::vector<config::NodeConfig>& pool,
                                  const PsRequest& request);

}  // namespace ravnest::planner
