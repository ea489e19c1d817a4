// PlanFile: the contents of a plan directory's plan.json, its one reader and one writer
// (docs/node-metadata.md#plan). `ravnest clusterize` writes it (graph's stage_writer and
// ps_plan_writer fill a PlanFile), `ravnest` reads it to find the plan's node files
// (requester's load_plan) and rewrites it when a spare replaces a node (node_replacement).
//
// The bytes stay as they were: keys sorted (nlohmann::json's objects), two-space indents, a final
// newline, numbers with the types the writers always used. The optional blocks are written only
// when present. Reading is strict about what is there (JsonReader: one ConfigError line naming the
// file and the field); of the fields every plan has, only "format" and "clusters" are required, so
// that a hand-written plan (tests, docs) still loads: the others read as their defaults. Plain
// values: copyable, thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

inline constexpr const char* kPlanFormat = "ravnest.plan/1";

struct PlanCluster {
  int id = 0;
  double samples_per_second = 0;
  std::vector<int> nodes;  // pipeline order: root first
};

struct PlanRing {
  int id = 0;
  std::vector<std::string> parameters;
  std::vector<int> nodes;  // one per cluster, in cluster order
};

// How the planner was asked to model the pipeline ("planning": written when a schedule or a
// codec was given); the names are those of job.toml (config::to_string of the enums).
struct PlanPlanning {
  std::string schedule;  // or "unmodelled"
  int64_t micro_batches = 0;
  int64_t max_in_flight = 0;
  std::string activations;
  std::string gradients;
};

struct PlanServer {
  int node = 0;
  uint64_t tensors = 0;  // a count: the names are in the node file
  int64_t bytes = 0;
  double exchange_seconds = 0;
};

struct PlanParameterServer {
  std::vector<PlanServer> servers;
  std::optional<int> evaluator;
  std::optional<std::vector<SparseTable>> sparse_tables;  // a hybrid plan's
};

struct PlanFile {
  std::string format = kPlanFormat;
  std::string model;         // absolute path of the model the plan was cut from
  std::string model_sha256;  // of its bytes
  uint64_t seed = 0;
  std::vector<std::string> example_inputs;
  std::optional<PlanPlanning> planning;
  std::string mode;          // "" (a pipeline plan), "parameter_server" or "hybrid"
  double samples_per_second = 0;
  std::optional<double> step_seconds;  // a parameter-server plan's
  std::vector<PlanCluster> clusters;   // by id
  std::vector<PlanRing> rings;         // by id
  std::optional<PlanParameterServer> parameter_server;
  std::optional<std::vector<int>> unplaced_nodes;  // a parameter-server plan's

  // Every node of the plan, each once: the clusters' in order, then a parameter-server plan's
  // servers and evaluator (which belong to no cluster).
  std::vector<int> node_ids() const;
};

std::string to_json(const PlanFile& plan);  // pretty, keys sorted, with a final newline
PlanFile plan_file_from_json(const std::string& text, const std::string& origin);
PlanFile load_plan_file(const std::string& path);  // throws ConfigError naming `path`

}  // namespace ravnest::config
