// StageChain: one cluster's stages run one after another in this process, wired by their node
// metadata alone. It is what the daemons compute, without the network: the check behind
// `ravnest clusterize --verify` and a reference for the runtime's tests.
//
// Forward hands every stage its inputs as fresh leaves (floating tensors require grad), as a
// remote stage would receive them; backward runs the leaf's loss backward, then each stage in
// reverse pipeline order with the sum of the gradients its consumers computed for its outputs.
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "libs/config/node_metadata.h"

namespace ravnest::graph {

class StageChain {
 public:
  // `nodes` in pipeline order; stage files are read relative to `plan_dir`.
  static StageChain load(const std::string& plan_dir, std::vector<config::NodeMetadata> nodes);

  void train(bool on);
  c10::IValue forward(const std::vector<c10::IValue>& model_inputs);
  void backward(const at::Tensor& loss);  // after forward

  const std::vector<config::NodeMetadata>& nodes() const { return nodes_; }
  std::vector<torch::jit::Module>& stages() { return stages_; }

 private:
  std::vector<config::NodeMetadata> nodes_;
  std::vector<torch::jit::Module> stages_;
  std::vector<std::vector<c10::IValue>> received_;  // per stage, its inputs as leaves
  std::vector<std::vector<c10::IValue>> produced_;  // per stage, its output tuple
};

// The sum of every floating-point tensor in a (possibly nested) output: the loss of --verify.
at::Tensor sum_of_outputs(const c10::IValue& output);

struct ChainComparison {
  double output_diff = 0;  // largest absolute difference of the forward outputs
  double grad_diff = 0;    // of any parameter's gradient
  double buffer_diff = 0;  // of any buffer after the forward (BatchNorm statistics)
  std::string worst;       // what differed most
  double max() const;
};

// Runs the whole model and the chain in training mode from the same RNG state on `inputs`, with
// a sum-of-outputs loss, and compares. Parameters held by several stages (a module used twice,
// tied weights) are compared as the sum of their gradients.
ChainComparison compare_with_model(const std::string& model_path, StageChain& chain,
                                   const std::vector<at::Tensor>& inputs, uint64_t seed);

}  // namespace ravnest::graph
