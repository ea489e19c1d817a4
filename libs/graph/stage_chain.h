// StageChain: one cluster's stages run one after another in this process, wired by their node
// metadata alone, whatever their format (stage::Stage). It is what the daemons compute, without the network: the check behind
// `ravnest clusterize --verify` and a reference for the runtime's tests.
//
// Forward hands every stage its inputs as fresh leaves (floating tensors require grad), as a
// remote stage would receive them; backward runs the leaf's loss backward, then each stage in
// reverse pipeline order with the sum of the gradients its consumers computed for its outputs.
// Each forward returns its micro-batch's own state, so several micro-batches can be in flight at
// once, in the order the daemons' GPipe schedule runs them (every forward, then every backward).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <memory>

#include <ATen/core/ivalue.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/stage/stage.h"

namespace ravnest::graph {

class StageChain {
 public:
  // One micro-batch's pass: the model's output and what its backward needs. Independent of
  // every other pass; it keeps that micro-batch's autograd graph alive until it is dropped.
  struct Pass {
    c10::IValue output;                              // what the model returns
    std::vector<std::vector<c10::IValue>> received;  // per stage, its inputs as leaves
    std::vector<std::vector<c10::IValue>> produced;  // per stage, its output tuple
  };

  // `nodes` in pipeline order; stage files are read relative to `plan_dir`.
  static StageChain load(const std::string& plan_dir, std::vector<config::NodeMetadata> nodes);

  void train(bool on);
  Pass forward(const std::vector<c10::IValue>& model_inputs);
  // `loss` is computed from pass.output; gradients accumulate into the stages' parameters. At
  // most once per pass: autograd frees its graph.
  void backward(const Pass& pass, const at::Tensor& loss);

  const std::vector<config::NodeMetadata>& nodes() const { return nodes_; }
  std::vector<std::shared_ptr<stage::Stage>>& stages() { return stages_; }

 private:
  std::vector<config::NodeMetadata> nodes_;
  std::vector<std::shared_ptr<stage::Stage>> stages_;
};

// The sum of every floating-point tensor in a (possibly nested) output: the loss of --verify.
at::Tensor sum_of_outputs(const c10::IValue& output);

struct ChainComparison {
  double output_diff = 0;  // largest absolute difference of the forward outputs
  double grad_diff = 0;    // of any parameter's gradient
  double buffer_diff = 0;  // of any buffer at the end (BatchNorm statistics)
  std::string worst;       // what differed most
  std::string failure;     // when the chain threw: where and why (output_diff is then infinite)
  double max() const;
};

// The whole model itself fails on the inputs given (or on one of their micro-batches: BatchNorm
// cannot train on one value per channel), so there is nothing to compare the chain with.
// `reason` is the model's one-line error, without the model's path.
class WholeModelFailure : public std::runtime_error {
 public:
  WholeModelFailure(const std::string& what, std::string reason)
      : std::runtime_error(what), reason(std::move(reason)) {}
  std::string reason;
};

// Runs the whole model and the chain in training mode from the same RNG state on `inputs` cut
// along dim 0 into `micro_batches` parts (data::split_micro_batches), and compares outputs,
// accumulated gradients and buffers. The loss of a micro-batch is the sum of its outputs times
// samples / batch samples. The model runs forward and backward of each micro-batch in turn; the
// chain as the GPipe schedule does: every forward, then every backward, in micro-batch order, so
// a stage that overwrites what an earlier micro-batch's graph still needs is caught (autograd's
// error comes back as `failure`, naming the micro-batch). Parameters held by several stages (a
// module used twice, tied weights) are compared as the sum of their gradients, added as autograd
// adds them in the whole model: each micro-batch's shares of the stages first (the last stage's
// first, as the last use's gradient arrives first), then micro-batch
// after micro-batch (summed the other way, the rounding differs). `chain` must be fresh from
// load(): its gradients (left undefined) and buffers are changed. Throws when the inputs cannot be
// cut (no common dim 0), WholeModelFailure when the whole model itself fails.
ChainComparison compare_with_model(const std::string& model_path, StageChain& chain,
                                   const std::vector<at::Tensor>& inputs, uint64_t seed,
                                   int micro_batches = 1);

}  // namespace ravnest::graph
