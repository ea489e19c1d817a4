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
//
// With ignored labels (cross_entropy and nll, [loss] ignore_index) the mean is over the labels
// that count, so a micro-batch's share is its counted labels over the batch's instead:
// micro_batch_loss_weight(counted, batch_counted, update_frequency). Batches where no label is
// ignored keep the samples' shares (the same numbers, as before).
double micro_batch_loss_weight(int64_t samples, int64_t batch_samples, int update_frequency);

// Where the classes are in `output` against `labels` for cross_entropy, nll and accuracy: 1
// (PyTorch's [N, C, d1...]) or output.dim() - 1 (the last: [N, d1..., C], language models'
// logits [N, T, V]). spec.class_dim decides when set; else for an output of 3 or more
// dimensions and integer labels of its shape without the last dimension, the last; else 1.
// When the labels are both ([N, A, A] against [N, A]), the last for a 3-D output, 1 for more.
int64_t class_dimension(const at::Tensor& output, const at::Tensor& labels,
                        const config::LossSpec& spec);

// The labels that count in a mean loss: for cross_entropy and nll with integer labels, those
// not equal to spec.ignore_index; -1 for every other loss (their mean is per sample).
int64_t counted_labels(const at::Tensor& labels, const config::LossSpec& spec);

// True when labels of `counted_labels` must weigh micro-batches (some label of the batch is
// ignored): `counted` labels of a batch of `samples` samples whose labels hold `elements`.
inline bool weigh_by_labels(int64_t counted, int64_t elements) {
  return counted >= 0 && counted != elements;
}

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
  // are read as [N, 1]). cross_entropy and nll find the classes with class_dimension and
  // average over the labels not equal to spec.ignore_index (as PyTorch's
  // F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1)) for [N, T, V] logits). The script loss gets the whole output and the labels as stored and
  // must return a scalar tensor. Throws std::runtime_error on mismatched shapes or types.
  at::Tensor operator()(const c10::IValue& model_output, const at::Tensor& labels) const;

  config::LossName name() const { return spec_.name; }
  const config::LossSpec& spec() const { return spec_; }

  // The tensor built-in losses and accuracy read: the output, or the first tensor of a tuple or
  // list. Throws std::runtime_error for anything else.
  static at::Tensor primary_output(const c10::IValue& model_output);

  // Checks, before training, that the built-in loss takes `model_output` against `labels` (a
  // sample or a few of the data): throws std::runtime_error with one line naming [loss] and both
  // shapes when it does not. A script loss is run on them.
  void check(const c10::IValue& model_output, const at::Tensor& labels) const;

 private:
  config::LossSpec spec_;
  std::unique_ptr<torch::jit::Module> script_;
};

}  // namespace ravnest::training
