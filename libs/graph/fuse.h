// Fuse: a trained cluster's stages back into one model.
//
// Every stage file holds its parameters and buffers under the model's state-dict names
// (docs/node-metadata.md). fuse_stages gathers them all and writes, into out_dir:
//   trained_state_dict.pt  a plain dict name -> tensor (torch::pickle_save), in the original
//                          model's state_dict order; Python reads it with torch.load and can
//                          load_state_dict(..., strict=True) it into the original model;
//   model.pt               the original TorchScript model with every parameter and buffer set to
//                          the trained values (tied names stay one tensor), Module::save'd;
//   model.pt2              or, for a model from torch.export, the original archive with its
//                          weights trained, which torch.export.load(...).module() runs in Python.
// A .pt2's state dict holds its parameters and persistent buffers in the exported signature's
// order (non-persistent buffers are not in a state dict, as in PyTorch).
// Each file is written atomically (temporary file, then rename); nothing is written unless every
// check passes.
//
// Checks, each a FuseError naming what is wrong:
//  - every stage loads, holds exactly the names its metadata lists, and node ids are distinct;
//  - a name held by several stages (shared_parameters: a module used by two stages, or tied
//    weights split across stages), and every pair of tied names (tied_parameters), hold equal
//    values within `tolerance` (largest absolute difference), and equal shapes;
//  - the stages' names together are exactly the original model's state-dict names (missing and
//    unknown names are listed, up to 5 of each);
//  - every tensor has the original's shape (the dtype is converted to the original's).
// Where a name has several copies, the first stage's (in `stages` order) is taken; tied names
// take the value of the name they are tied to.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::graph {

class FuseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StageFile {
  config::NodeMetadata metadata;
  std::string path;   // the stage's TorchScript file; used when `bytes` is empty
  std::string bytes;  // or the file's bytes (e.g. received from the node)
  // A parameter server's stage: the whole model, of which only its shard (these names) was
  // trained there. Empty: every name the metadata lists.
  std::vector<std::string> only;
};

struct FuseResult {
  std::string state_dict_path;       // out_dir/trained_state_dict.pt
  std::string model_path;            // out_dir/model.pt, or model.pt2 for a torch.export model
  size_t tensors = 0;                // entries of the state dict (tied names each count)
  int64_t elements = 0;              // their elements, each distinct tensor once
  size_t shared_names = 0;           // names held by more than one stage
  double max_shared_difference = 0;  // largest difference seen between copies of one tensor
};

inline constexpr const char* kTrainedStateDictFile = "trained_state_dict.pt";
inline constexpr const char* kFusedModelFile = "model.pt";
inline constexpr const char* kFusedExportedFile = "model.pt2";

// `model_path`: the original model the plan was cut from (TorchScript, or a .pt2 archive). `out_dir` is created if
// needed.
FuseResult fuse_stages(const std::string& model_path, const std::vector<StageFile>& stages,
                       const std::string& out_dir, double tolerance = 1e-6);

// The servers of a parameter-server plan as StageFiles that give their shards only (`stages`:
// the servers' stages with their metadata, e.g. fetched from them); a hybrid plan's trainer
// among them gives its dense part (its tables are empty placeholders).
std::vector<StageFile> server_shards(std::vector<StageFile> stages);

// The stages of one cluster of a plan directory written by `ravnest clusterize`
// (nodes/node_<id>.json, paths relative to plan_dir), in pipeline order. Throws FuseError when
// the cluster has no node, or ConfigError for an unreadable node file.
std::vector<StageFile> cluster_stage_files(const std::string& plan_dir, int cluster = 0);

}  // namespace ravnest::graph
