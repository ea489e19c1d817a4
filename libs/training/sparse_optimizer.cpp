#include "libs/training/sparse_optimizer.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::training {

SparseRowOptimizer::SparseRowOptimizer(at::Tensor table, config::SparseOptimizerSpec spec)
    : table_(std::move(table)), spec_(spec) {
  if (!table_.defined() || table_.dim() < 1 || !table_.is_floating_point()) {
    throw std::invalid_argument("a sparse optimizer needs a floating-point table");
  }
  switch (spec_.name) {
    case config::SparseOptimizerName::kSgd:
      break;
    case config::SparseOptimizerName::kAdagrad:
      first_ = at::full_like(table_, spec_.initial_accumulator_value);
      break;
    case config::SparseOptimizerName::kSparseAdam:
      first_ = at::zeros_like(table_);
      second_ = at::zeros_like(table_);
      break;
  }
}

void SparseRowOptimizer::step(const at::Tensor& ids, const at::Tensor& grad) {
  if (ids.scalar_type() != at::kLong || ids.dim() != 1) {
    throw std::invalid_argument("sparse step: ids must be a 1-D int64 tensor");
  }
  const int64_t u = ids.size(0);
  if (grad.dim() != table_.dim() || grad.size(0) != u ||
      grad.sizes().slice(1) != table_.sizes().slice(1)) {
    throw std::invalid_argument("sparse step: gradient rows of shape " +
                                c10::str(grad.sizes()) + " for " + std::to_string(u) +
                                " ids of a table " + c10::str(table_.sizes()));
  }
  if (u > 0) {
    if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= table_.size(0)) {
      throw std::invalid_argument("sparse step: a row id outside the table");
    }
    if (u > 1 && !(ids.slice(0, 1) > ids.slice(0, 0, -1)).all().item<bool>()) {
      throw std::invalid_argument("sparse step: ids not sorted and unique");
    }
  }
  torch::NoGradGuard no_grad;
  ++steps_;
  if (u == 0) return;
  const at::Tensor g = grad.to(table_.scalar_type());
  const at::Tensor rows = table_.index_select(0, ids);
  switch (spec_.name) {
    case config::SparseOptimizerName::kSgd:
      // param.add_(grad, alpha=-lr)
      table_.index_copy_(0, ids, rows.add(g, -spec_.lr));
      break;
    case config::SparseOptimizerName::kAdagrad: {
      const double clr = spec_.lr / (1 + static_cast<double>(steps_ - 1) * spec_.lr_decay);
      // state_sum.add_(grad^2); std = state_sum[rows].sqrt_().add_(eps)
      const at::Tensor sum = first_.index_select(0, ids).add(g.pow(2));
      first_.index_copy_(0, ids, sum);
      const at::Tensor std = sum.sqrt().add_(spec_.eps);
      table_.index_copy_(0, ids, rows.add(g / std, -clr));
      break;
    }
    case config::SparseOptimizerName::kSparseAdam: {
      const auto [beta1, beta2] = spec_.betas;
      const at::Tensor old_avg = first_.index_select(0, ids);
      at::Tensor avg_update = g.sub(old_avg).mul_(1 - beta1);
      first_.index_copy_(0, ids, old_avg.add(avg_update));
      const at::Tensor old_sq = second_.index_select(0, ids);
      at::Tensor sq_update = g.pow(2).sub_(old_sq).mul_(1 - beta2);
      second_.index_copy_(0, ids, old_sq.add(sq_update));
      const at::Tensor numer = avg_update.add_(old_avg);
      const at::Tensor denom = sq_update.add_(old_sq).sqrt_().add_(spec_.eps);
      const double bias1 = 1 - std::pow(beta1, static_cast<double>(steps_));
      const double bias2 = 1 - std::pow(beta2, static_cast<double>(steps_));
      const double step_size = spec_.lr * std::sqrt(bias2) / bias1;
      table_.index_copy_(0, ids, rows.add(numer.div_(denom).mul(-step_size)));
      break;
    }
  }
}

std::pair<at::Tensor, at::Tensor> coalesce_rows(const std::vector<at::Tensor>& ids,
                                                const std::vector<at::Tensor>& grads) {
  if (ids.size() != grads.size()) throw std::invalid_argument("coalesce_rows: ids and grads differ");
  if (ids.empty()) return {at::empty({0}, at::kLong), at::empty({0})};
  torch::NoGradGuard no_grad;
  const at::Tensor all_ids = at::cat(ids).to(at::kLong);
  const at::Tensor all_rows = at::cat(grads);
  auto [unique, inverse, counts] = at::_unique2(all_ids, /*sorted=*/true, /*return_inverse=*/true);
  std::vector<int64_t> shape = all_rows.sizes().vec();
  shape[0] = unique.size(0);
  at::Tensor sum = at::zeros(shape, all_rows.options());
  // index_add_ adds in index order on the CPU: rows of earlier inputs first.
  sum.index_add_(0, inverse, all_rows);
  return {unique, sum};
}

}  // namespace ravnest::training
