// ModelGraph: a TorchScript model's forward as one flat graph, read as a sequence of units: the
// CutModel (cut_model.h) of TorchScript, whose overrides live in torchscript_cut.cpp.
//
// The forward method is inlined into a single graph. Its top-level nodes are of two kinds:
//  - free nodes: constants, attribute reads from `self` (parameters, buffers, submodules,
//    flags) and pure non-tensor computations on those. They cost nothing and are re-created in
//    every stage that uses them, so they never cross a cut.
//  - units: every other top-level node, in execution order (prim::If and prim::Loop stay whole).
// A stage is a contiguous range of units. A cut after unit i is allowed when every value that
// crosses it can be carried (tensors, numbers, bools, strings, None, lists of numbers, and
// optionals of those) and no later unit writes
// in place to something that crosses it (the consumer would mutate its own copy), and when no
// mutated attribute is touched on both sides of it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include "libs/graph/cut_model.h"

namespace ravnest::graph {

using AttributePath = std::vector<std::string>;  // {"layer1", "0", "conv1", "weight"}
std::string join_path(const AttributePath& path);  // "layer1.0.conv1.weight"

class ModelGraph final : public CutModel {
 public:
  // Loads `path` with load_module (module_file.h). Throws std::runtime_error "<path>: ..." when the file is
  // missing, is not TorchScript, or has no forward method.
  static std::unique_ptr<ModelGraph> load(const std::string& path);

  const std::string& path() const override { return path_; }

  // CutModel (torchscript_cut.cpp): profile_model, wire_stages and build_stage_module.
  std::string format() const override { return "TorchScript"; }
  size_t unit_count() const override { return units_.size(); }
  void check_inputs(size_t given) const override;
  planner::ModelProfile profile(const std::vector<at::Tensor>& inputs) const override;
  std::vector<CutStage> cut(const std::vector<std::pair<size_t, size_t>>& ranges) const override;
  SavedStage save_stage(const std::vector<CutStage>& stages, size_t s,
                        const std::string& stage_name, const std::string& path) const override;
  std::map<std::string, std::string> canonical_names() const override;
  std::vector<std::string> state_names() const override;
  std::vector<std::pair<std::string, at::Tensor>> named_state() const override;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;

  torch::jit::Module& module() { return module_; }
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  torch::jit::Value* self_value() const { return graph_->inputs()[0]; }

  // The model's forward arguments after self: names and how many must be given.
  const std::vector<torch::jit::Value*>& model_inputs() const { return model_inputs_; }
  size_t required_inputs() const { return required_inputs_; }
  std::vector<std::string> input_names() const;

  // Units in execution order.
  const std::vector<torch::jit::Node*>& units() const { return units_; }
  std::string unit_label(size_t unit) const;

  bool is_free(const torch::jit::Node* top_level_node) const;

  // Position of a value's definition: -1 for model inputs, the unit index for unit outputs.
  // Free values and self are not positioned (they are re-created where used).
  bool is_positioned(const torch::jit::Value* v) const;
  int defined_at(const torch::jit::Value* v) const;
  // Last unit that uses the value; units().size() when the model returns it.
  int last_used_at(const torch::jit::Value* v) const;
  // Positioned values in definition order (model inputs first).
  const std::vector<torch::jit::Value*>& positioned_values() const { return positioned_; }

  // Control flow in TorchScript (early returns, values set in one branch) yields placeholders
  // that are never read; such a value may cross a cut as a placeholder of type Any.
  bool may_be_uninitialized(const torch::jit::Value* v) const;

  bool cut_allowed(size_t boundary) const { return cut_allowed_[boundary]; }
  const std::vector<bool>& cut_allowed() const override { return cut_allowed_; }

  // For values produced by attribute reads (at any depth): the attribute path from self.
  const AttributePath* attribute_path(const torch::jit::Value* v) const;
  // The top-level node that contains `n` (itself when top-level).
  torch::jit::Node* top_level_node(torch::jit::Node* n) const;
  // The unit index of a top-level node, or -1 for free nodes and the return node.
  int unit_of(const torch::jit::Node* top_level) const;

 private:
  ModelGraph() = default;
  void analyse();
  void classify_nodes();
  void index_attribute_paths(torch::jit::Block* block);
  void compute_liveness();
  void compute_cut_rules();
  // The unit a use of a value belongs to: units().size() for the graph's return, -1 for a free
  // node.
  int unit_using(torch::jit::Node* user) const;

  std::string path_;
  torch::jit::Module module_;
  std::shared_ptr<torch::jit::Graph> graph_;
  std::vector<torch::jit::Value*> model_inputs_;
  size_t required_inputs_ = 0;
  std::vector<torch::jit::Node*> units_;
  std::unordered_map<const torch::jit::Node*, int> unit_index_;
  std::unordered_map<const torch::jit::Node*, bool> free_;
  std::unordered_map<const torch::jit::Value*, AttributePath> attribute_paths_;
  std::vector<torch::jit::Value*> positioned_;
  std::unordered_map<const torch::jit::Value*, int> defined_at_;
  std::unordered_map<const torch::jit::Value*, int> last_used_at_;
  std::vector<bool> cut_allowed_;
};

// Whether a value of this type can be carried between stages (see the header comment).
bool carriable_type(const c10::TypePtr& type);

}  // namespace ravnest::graph
