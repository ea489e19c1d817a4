// CutModel: a model as `ravnest clusterize` cuts it, whatever format it came in. Two
// implementations: ModelGraph (model_graph.h, TorchScript: the legacy input) and ExportedCutModel
// (exported_cut_model.h, torch.export's .pt2 on LibTorch 2.x). The planner, the memory plan, the
// stage writer and --verify hold a CutModel and do not learn which one they cut.
//
// The model is a sequence of units (planner/model_profile.h); a stage is a contiguous range of
// them. cut() wires a cluster's ranges (pure: from the graph alone): the root takes every model
// input and passes on those later stages need; every value a stage needs from an earlier one
// arrives directly from the stage that produced it; the leaf returns the model's output.
// save_stage() writes one stage in the model's own format (a TorchScript module, a .pt2 archive)
// holding its parameters and buffers under their original state-dict names; what no unit reads
// travels with the root, so the fused state dict is complete.
//
// Not thread-safe; clusterize's thread owns it. Errors are exceptions naming the model's file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/planner/model_profile.h"

namespace ravnest::graph {

// A stage's input as the plan's metadata says it (config::StageInput): the value's name and
// type, and where it comes from: a model input (root) or an earlier stage's output.
struct CutInput {
  std::string value;
  std::string type;      // "Tensor", "int", "Optional[Tensor]", ...
  int model_input = -1;  // >= 0: the model's input of that index
  int stage = -1;        // else the producing stage's index within the cluster
  int output = -1;       //      and the index into its outputs
};

struct CutOutput {
  std::string value;
  std::string type;
  std::vector<int> consumers;  // stage indices within the cluster
};

struct CutStage {
  size_t first_unit = 0;
  size_t end_unit = 0;
  bool is_leaf = false;
  std::vector<CutInput> inputs;
  std::vector<CutOutput> outputs;  // non-leaf: what it returns, in order
  // What the stage's file holds beside its code (state names or module paths), sorted: with
  // the units and the inputs and outputs it decides the file, so equal stages of clusters cut
  // alike are written once (stage_writer.h).
  std::vector<std::string> held;
};

// What a written stage file holds.
struct SavedStage {
  std::vector<std::string> parameters;          // state-dict names (parameters and buffers), model order
  std::vector<std::string> trained_parameters;  // its named parameters
  int64_t parameter_count = 0;                  // elements of its parameters
  bool draws_random_numbers = false;            // dropout & co. in training mode (randomness.h)
};

class CutModel {
 public:
  virtual ~CutModel() = default;

  // The model's file, as messages name it.
  virtual const std::string& path() const = 0;
  // "TorchScript" or "torch.export".
  virtual std::string format() const = 0;
  virtual size_t unit_count() const = 0;
  // Size max(units - 1, 0): whether a cut after unit i is allowed (the format's rules).
  virtual const std::vector<bool>& cut_allowed() const = 0;

  // Throws std::invalid_argument naming the model and the argument when `given` example inputs
  // do not fit the model's inputs.
  virtual void check_inputs(size_t given) const = 0;
  // Runs the model once unit by unit on `inputs` (on a copy: the model's buffers stay as they
  // were) and measures what the planner needs. Throws std::runtime_error "<model>: forward fails
  // on the example input: ..." or a one-line refusal of what cannot be cut and trained.
  virtual planner::ModelProfile profile(const std::vector<at::Tensor>& inputs) const = 0;
  // `ranges`: consecutive [first, end) unit ranges covering every unit, in pipeline order.
  virtual std::vector<CutStage> cut(
      const std::vector<std::pair<size_t, size_t>>& ranges) const = 0;
  // Writes stage `s` of `stages` (one cut()) to `path`, not atomically: stages are written into
  // a staging directory moved into place whole (clusterize.h). `stage_name` names it inside the
  // file where the format has a name (the node's name).
  virtual SavedStage save_stage(const std::vector<CutStage>& stages, size_t s,
                                const std::string& stage_name, const std::string& path) const = 0;
  // Every state name mapped to the first name of the same tensor (tied weights).
  virtual std::map<std::string, std::string> canonical_names() const = 0;
  // Every state name in the model's state_dict order.
  virtual std::vector<std::string> state_names() const = 0;
  // The state dict's tensors under those names (tied names share a tensor), and the parameters
  // among them: what a parameter-server plan shards (ps_plan_writer.h).
  virtual std::vector<std::pair<std::string, at::Tensor>> named_state() const = 0;
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters() const = 0;
  // The one batch size the model runs at (a .pt2 exported without a batch Dim in its
  // dynamic_shapes: micro-batches of another size fail), or 0: any batch.
  virtual int64_t static_batch() const { return 0; }
};

// The model at `path` in its format, told from the file's content: a .pt2 archive
// (ExportedCutModel; the 1.13 build refuses it in one line) or TorchScript (ModelGraph).
std::unique_ptr<CutModel> load_cut_model(const std::string& path);

}  // namespace ravnest::graph
