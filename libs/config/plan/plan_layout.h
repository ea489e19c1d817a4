// PlanLayout: where the files of a plan directory live. `ravnest clusterize` writes the
// directory, ravnest's other commands and the tests read it (docs/node-metadata.md):
//   DIR/plan.json              the clusters and rings, and the model the plan was cut from
//   DIR/nodes/node_<id>.json   each node's NodeMetadata
//   DIR/stages/node_<id>.pt    each node's TorchScript stage; NodeMetadata::stage_file names it
//                              relative to DIR
// These names are spelled here only. Paths are joined as std::filesystem joins them. Pure
// path arithmetic: nothing here touches the disk. Copyable; thread-compatible.
#pragma once

#include <string>
#include <utility>

namespace ravnest::config {

class PlanLayout {
 public:
  static constexpr const char* kPlanFile = "plan.json";
  static constexpr const char* kNodesDir = "nodes";
  static constexpr const char* kStagesDir = "stages";

  explicit PlanLayout(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string plan_file() const;             // DIR/plan.json
  std::string nodes_dir() const;             // DIR/nodes
  std::string stages_dir() const;            // DIR/stages
  std::string node_file(int node_id) const;  // DIR/nodes/node_<id>.json
  // DIR/relative, for paths the plan's files hold relative to DIR (NodeMetadata::stage_file).
  std::string resolve(const std::string& relative) const;

  // "stages/node_<id>.pt": a stage's path relative to DIR, as NodeMetadata::stage_file holds it.
  static std::string stage_file(int node_id);
  // Whether a file name in nodes_dir() is a node file ("node_*.json").
  static bool is_node_file(const std::string& filename);

 private:
  std::string dir_;
};

}  // namespace ravnest::config
