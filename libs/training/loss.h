// Loss: the job's [loss] as a callable on the model's output and the labels, and the weighting
// of micro-batch losses that every trainer (reference and distributed) uses.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "libs/config/job/job_spec.h"

namespace torch::jit {
struct Module;
}

namespace ravnest::training {

// The loss weighting convention. A batch of `batch_samples` samples is split into
// micro-batches; the mean loss of a micro-batch of `samples` samples is multiplied by
//     samples / batch_samples / update_frequency
// before backward, so the gradients accumulated over a batch equal those of the batch's mean
// loss, and over `update_frequency` batches their average. The optimizer steps (then zeroes the
// gradients) after every update_frequency batches and once more after the last batch of
// training when an accumulation is pending (that partial step keeps the 1/update_frequency
// factor). Batches count across epoch boundaries.
double micro_batch_loss_weight(int64_t samples, int64_t batch_samples, int update_frequency);

class Loss {
 public:
  // Loads the TorchScript module of a "script" loss (loss.path.resolved); throws
  // std::runtime_error naming the file when it cannot.
  explicit Loss(const config::LossSpec& spec);
  ~Loss();
  Loss(const Loss&) = delete;
  Loss& operator=(const Loss&) = delete;

  // The mean loss of the samples of `model_output` against `labels` (a 0-dim tensor that
  // requires grad when the output does). Built-in losses take the output tensor, or the first
  // tensor of a tuple/list output; labels are converted to int64 for cross_entropy and nll
  // (cross_entropy takes float labels of the output's shape as class probabilities), to the
  // output's float dtype for mse, l1 and bce_with_logits (labels [N] against an output [N, 1]
  // are read as [N, 1]). The script loss gets the whole output and the labels as stored and
  // must return a scalar tensor. Throws std::runtime_error on mismatched shapes or types.
  at::Tensor operator()(const c10::IValue& model_output, const at::Tensor& labels) const;

  config::LossName name() const { return spec_.name; }
  const config::LossSpec& spec() const { return spec_; }

  // The tensor built-in losses and accuracy read: the output, or the first tensor of a tuple or
  // list. Throws std::runtime_error for anything else.
  static at::Tensor primary_output(const c10::IValue& model_output);

 private:
  config::LossSpec spec_;
  std::unique_ptr<torch::jit::Module> script_;
};

}  // namespace ravnest::training
