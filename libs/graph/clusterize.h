// Clusterize: the whole of `ravnest clusterize` as a library call. Reads the node pool, loads and
// profiles the model, plans clusters and cuts, builds one stage per node, writes the plan under
// the output directory and optionally checks it. Nothing is written to the output directory
// until everything (including the check) has succeeded: the plan is assembled in a temporary
// directory beside it and moved into place by renames.
// Each mode is its own plan, made by its own function and written by its own writer
// (clusterize.cpp: PipelinePlan for pipeline, ServerPlan for ps and hybrid); loading, verifying
// and committing are shared. The report printed at the end: plan_report.h.
//
// Output (docs/node-metadata.md): OUT/plan.json, OUT/nodes/node_<id>.json, OUT/stages/node_<id>.pt
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/graph/clusterize_progress.h"
#include "libs/graph/stage_memory.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/ps_plan.h"

namespace ravnest::graph {

// pipeline: clusters of pipelines (docs/planner.md); parameter_server: servers, workers and an
// optional evaluator; hybrid: embedding tables on servers, the rest data-parallel over trainers
// (docs/parameter-server.md).
enum class PlanMode { kPipeline, kParameterServer, kHybrid };

struct ClusterizeOptions {
  std::string model_path;
  PlanMode mode = PlanMode::kPipeline;
  planner::PsRequest parameter_servers;  // kParameterServer and kHybrid
  planner::PlanningOptions planning;     // kPipeline: the schedule and codecs planned for
  std::vector<std::string> on_server;    // kHybrid: the embedding submodules the servers hold
  std::string nodes_path = "node_data/node_configs.json";
  std::vector<std::string> example_inputs;
  std::string out_dir = "node_data";
  uint64_t seed = 42;
  bool verify = false;
  double verify_tolerance = 1e-5;
  // kPipeline: measures each stage's peak memory by training it once in a child process, and
  // plans with that (memory_planning.h); empty: the cost model's formula alone.
  MemoryProbe memory_probe;
  // Where the daemons will train ("cpu", "cuda", "cuda:N"). On a GPU the probes run on this
  // machine's GPU (it must have one), every node must declare benchmarks.gpu_memory, and a node
  // takes a stage whose larger peak, host or card, x the margin fits the smaller of its ram and
  // its gpu_memory (docs/planner.md#memory-on-a-gpu).
  std::string device = "cpu";
  // Told each phase's start, advance and end (clusterize_progress.h); empty: nobody listens.
  ClusterizeProgressFn progress;
};

struct PhaseTimes {
  double load = 0, profile = 0, plan = 0, cut = 0, save = 0, verify = 0;
};

struct ClusterizeResult {
  planner::PoolPlan plan;                             // kPipeline
  std::optional<planner::PsPoolPlan> ps_plan;         // kParameterServer and kHybrid
  std::vector<config::NodeMetadata> nodes;  // by cluster, then pipeline order
  double verify_max_diff = -1;              // -1 when not verified
  std::string verify_worst;
  PhaseTimes times;
};

// `log` receives the human-readable report line by line (Ravnest's Node(...) lines, the table).
// Throws std::exception with a one-line message naming the file or field on bad input.
ClusterizeResult clusterize(const ClusterizeOptions& options,
                            const std::function<void(const std::string&)>& log);

}  // namespace ravnest::graph
