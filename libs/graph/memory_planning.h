// Planning with measured memory (docs/planner.md#memory). The cost model's memory term is a
// formula (parameters, gradients, Adam's moments, activations, inputs); what a daemon really holds
// also has its own baseline, allocator slack, the checkpoint's copies, the schedule's
// micro-batches in flight, the messages being sent. So clusterize measures instead of assuming:
//
//  1. plan the pool as if memory were unlimited, cut those stages and probe each one (a child
//     process trains it as a daemon does: MemoryProbe); the probes give a daemon's baseline and,
//     per stage, measured over modelled bytes, which becomes its units' memory_scale;
//  2. plan the real pool with that calibrated model, cut and probe the stages not probed yet,
//     calibrate again; repeat (at most kMaxRounds) until every stage of the plan was measured and
//     fits its node: measured peak x memory_margin() <= RAM;
//  3. a plan whose measured stages still do not fit is refused, naming the node, its need and
//     its RAM.
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

namespace ravnest::graph {

struct MeasuredPlan {
  planner::PoolPlan plan;
  planner::PlanningOptions planning;     // stage_baseline_bytes: the measured baseline
  std::map<int, StageMemory> by_node;    // each planned node's stage, measured
  int probes = 0;                        // child processes run
};

inline constexpr int kMaxMemoryRounds = 3;

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
