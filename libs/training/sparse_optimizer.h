// SparseRowOptimizer: an embedding table's optimizer on row gradients. step(ids, grad) does what
// PyTorch 1.13's optimizer does when the table's gradient is the coalesced sparse tensor with
// those indices and rows (torch.optim.SGD, Adagrad, SparseAdam): only those rows of the table and
// of its state change, in the same operations in the same order. Every call is one step (its
// count drives Adagrad's lr_decay and SparseAdam's bias correction), with or without rows.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/job/sparse_optimizer_spec.h"

namespace ravnest::training {

class SparseRowOptimizer {
 public:
  // `table` is updated in place; its state starts as PyTorch's (zeros; Adagrad's sum at
  // initial_accumulator_value).
  SparseRowOptimizer(at::Tensor table, config::SparseOptimizerSpec spec);

  // ids: int64 [u], sorted and unique, within the table; grad: [u, table dims...]. Throws
  // std::invalid_argument (one line) otherwise.
  void step(const at::Tensor& ids, const at::Tensor& grad);

  double lr() const { return spec_.lr; }
  void set_lr(double lr) { spec_.lr = lr; }
  int64_t steps() const { return steps_; }

 private:
  at::Tensor table_;
  config::SparseOptimizerSpec spec_;
  int64_t steps_ = 0;
  at::Tensor first_, second_;  // Adagrad: the sum; SparseAdam: exp_avg, exp_avg_sq
};

// Row gradients gathered from several micro-batches or trainers, summed per id: ids[i] int64
// [u_i] (any order, repeats allowed) with grads[i] [u_i, dims...], added in the order given.
// Returns the sorted unique ids and their summed rows (both empty, [0] and [0, dims...], when
// nothing was given).
std::pair<at::Tensor, at::Tensor> coalesce_rows(const std::vector<at::Tensor>& ids,
                                                const std::vector<at::Tensor>& grads);

}  // namespace ravnest::training
