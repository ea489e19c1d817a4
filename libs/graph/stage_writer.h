// StageWriter: turns one planned cluster into files: a stage per node, in the model's format (a
// TorchScript module, a .pt2 archive: cut_model.h), under
// DIR/stages/ and the node metadata that wires them (rings are added by the caller, who sees
// every cluster). Shared by `clusterize` and the tests, which cut at chosen points.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/plan/plan_file.h"
#include "libs/config/pool/node_pool.h"
#include "libs/graph/cut_model.h"
#include "libs/planner/cluster_plan.h"

namespace ravnest::graph {

// A stage file already written, for the clusters cut at the same units (issue 26: a 10,000-node
// plan of repeated clusters writes each distinct stage once). Keyed by the stage's units and what
// it receives, sends and holds; the file is named after the first node that got it.
struct WrittenStage {
  std::string stage_file;  // relative to the plan directory
  std::string stage_sha256;
  std::vector<std::string> parameters;          // state_names, in the model's state order
  std::vector<std::string> trained_parameters;  // named_parameters
  int64_t parameter_count = 0;
  bool draws_random_numbers = false;
};
using WrittenStages = std::map<std::string, WrittenStage>;

// Cuts and saves one cluster's stages under `dir`, and returns their metadata (not yet written).
// With `written`, a stage equal to one written before (in any cluster) is not cut again: its node
// metadata names the same stage_file, and `written` learns the new ones.
std::vector<config::NodeMetadata> write_cluster_stages(
    const CutModel& model, const planner::ClusterPlan& cluster,
    const std::map<int, config::NodeConfig>& nodes, const std::string& dir,
    WrittenStages* written = nullptr);

// Writes DIR/nodes/node_<id>.json for each node, without a fsync each: DIR is a staging
// directory that its writer syncs once and moves into place whole (clusterize.cpp).
void write_node_files(const std::vector<config::NodeMetadata>& nodes, const std::string& dir);

// A whole plan into DIR: stages/, nodes/ and plan.json (docs/node-metadata.md#plan), rings
// included. Returns the nodes' metadata by cluster, then pipeline order.
struct PlanHeader {
  std::string model_path;
  uint64_t seed = 0;
  std::vector<std::string> example_inputs;
  planner::PlanningOptions planning;  // written as "planning" when a schedule or codec was given
};
// plan.json's fields every plan has: format, model (absolute), model_sha256, seed, example_inputs,
// and the planning options when a schedule or codec was given.
config::PlanFile plan_file_header(const PlanHeader& header);

// Each node's tls_fingerprints: the pool's pinned certificates of the given nodes.
void pin_certificates(std::vector<config::NodeMetadata>& nodes,
                      const std::map<int, config::NodeConfig>& pool);

std::vector<config::NodeMetadata> write_plan(const CutModel& model, const planner::PoolPlan& plan,
                                             const std::vector<config::NodeConfig>& pool,
                                             const PlanHeader& header, const std::string& dir);

}  // namespace ravnest::graph
