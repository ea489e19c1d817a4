// Planning with measured memory (docs/planner.md#memory). The cost model's memory term is a
// formula (parameters, gradients, Adam's moments, activations, inputs); what a daemon really holds
// also has its own baseline, allocator slack, the checkpoint's copies, the schedule's
// micro-batches in flight, the messages being sent. So clusterize measures instead of assuming:
// planner::plan_on_measurements (libs/planner/measured_planning.h) decides which stages to
// measure, calibrates on them and re-plans until every stage of a plan was measured and fits its
// node (measured peak x memory_margin() <= RAM), or refuses naming a node, its need and its RAM;
// here the clusters holding the stages asked for, and only those, are cut and written, and each
// stage asked for is probed (a child process trains it as a daemon does: MemoryProbe).
// Blocks for the probes (a stage's training, twice, in a child process each).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/pool/node_pool.h"
#include "libs/graph/cut_model.h"
#include "libs/graph/stage_memory.h"
#include "libs/graph/stage_writer.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/measured_planning.h"

namespace ravnest::graph {

struct MeasuredPlan {
  planner::PoolPlan plan;
  planner::PlanningOptions planning;     // stage_baseline_bytes: the measured baseline
  std::map<int, StageMemory> by_node;    // each planned node's stage, measured
  int probes = 0;                        // child processes run
};

// `scratch_dir` holds each round's stages and inputs (removed after). Throws
// planner::PoolTooSmall with a one-line message naming a node, what it needs and its RAM when
// no plan fits as measured.
MeasuredPlan plan_with_measured_memory(const CutModel& model, planner::ModelProfile profile,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<config::NodeConfig>& pool,
                                       const PlanHeader& header, const MemoryProbe& probe,
                                       const std::string& scratch_dir,
                                       const std::function<void(const std::string&)>& log);

}  // namespace ravnest::graph
