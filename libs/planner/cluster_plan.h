// Cluster formation and partitioning: group the pool's nodes into clusters that can each train
// the whole model, and cut the model into one contiguous stage per node, so as to maximise the
// pool's estimated training throughput (the sum of every cluster's samples/s; a cluster runs at
// the pace of its slowest stage). Deterministic for a given seed. docs/planner.md has the
// objective, the cost model and the search.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/model_profile.h"
#include "libs/planner/planning_options.h"

namespace ravnest::planner {

// Per-stage estimates of the cost model, for a node running units [first, end).
struct StageCost {
  double memory_bytes = 0;             // training memory (stash_bytes included)
  double stash_bytes = 0;              // async: the older parameter versions it keeps
  double compute_seconds = 0;          // forward + backward of the example batch on this node
  double transfer_seconds = 0;         // sending its activations and its input's gradients
  double step_seconds = 0;             // compute + transfer
  int64_t parameter_bytes = 0;
  double forward_bytes_per_sample = 0;
};

// `stages`: how many the node's cluster has (the async stash depends on it).
StageCost stage_cost(const ModelProfile& profile, size_t first, size_t end,
                     const config::NodeConfig& node, double reference_gflops,
                     const PlanningOptions& options = {}, size_t stages = 1);

// The margin a stage's memory is planned with: a node holds a stage when memory_bytes (its
// modelled or measured peak, a daemon's baseline included, times this) is at most its RAM.
double memory_margin();

// Calibrates the memory model on a measurement (docs/planner.md#memory): sets memory_scale of
// units [first, end) so that the model's bytes for that stage, a daemon's baseline excluded,
// equal `measured_bytes` (a probe's peak above its baseline). The stage's inputs are measured as
// they are modelled and stay unscaled. Precondition: a valid range of `profile`.
void calibrate_stage_memory(ModelProfile* profile, size_t first, size_t end, int64_t measured_bytes,
                            const PlanningOptions& options = {}, size_t stages = 1);

struct StagePlan {
  int node_id = 0;
  size_t first_unit = 0;  // units [first_unit, end_unit)
  size_t end_unit = 0;
  StageCost cost;
};

struct ClusterPlan {
  int id = 0;
  std::vector<StagePlan> stages;  // pipeline order: root first, leaf last
  double samples_per_second = 0;  // batch / (slowest step x bubble_factor)
};

struct PoolPlan {
  std::vector<ClusterPlan> clusters;
  double samples_per_second = 0;  // sum over clusters
  // Nodes no feasible cluster could take (each would leave any cluster unable to hold the
  // model, e.g. too little memory for the smallest stage); normally empty. Sorted by id.
  std::vector<int> unplaced_nodes;
};

// Thrown when no cluster can be formed; the message names the model's need and the pool's total.
class PoolTooSmall : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Best partition of units over `nodes` in the given pipeline order, one non-empty stage per
// node; empty result when the nodes cannot hold the model.
std::vector<StagePlan> partition(const ModelProfile& profile,
                                 const std::vector<config::NodeConfig>& ordered_nodes,
                                 double reference_gflops, const PlanningOptions& options = {});

PoolPlan plan_pool(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                   uint64_t seed, const PlanningOptions& options = {});

}  // namespace ravnest::planner
