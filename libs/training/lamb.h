// Lamb: torch_optimizer.Lamb (pytorch-optimizer 0.3.0, the optimizer Ravnest's BERT example
// trains with) as a LibTorch optimizer, stepping as that class does in Python on the same
// PyTorch version: the same operations in the same order on the same dtypes.
//
// Per parameter with a gradient (one step of Python's loop, which Lamb::step runs in order):
//   m = m * beta1 + g * (1 - beta1);  v = v * beta2 + g * g * (1 - beta2)
//   step_size = lr, times sqrt(1 - beta2^t) / (1 - beta1^t) with debias
//   weight_norm = clamp(norm(p), 0, clamp_value)
//   adam_step = m / (sqrt(v) + eps) + weight_decay * p     (L2 inside the trust ratio's step)
//   trust = weight_norm / norm(adam_step), but 1 when either norm is 0 or with adam = true
//   p -= step_size * trust * adam_step
// Its quirks kept: weight_decay enters the step (not the gradient, not the moments), the trust
// ratio reads the clamped weight norm, and the product step_size * trust is rounded to float
// (the parameter's dtype) before it scales the step, as Python multiplies a float by a 0-dim
// tensor. torch_optimizer's clamp_value, adam and debias are attributes of the optimizer, not of
// a param group; here they are LambOptions fields (one group holds every parameter). Its
// diagnostic state (weight_norm, adam_norm, trust_ratio) is not kept: nothing reads it.
//
// State (LambParamState: step, exp_avg, exp_avg_sq) saves and loads through LibTorch's optimizer
// archive like Adam's, so checkpoints resume it exactly. Runs on the calling thread; step()
// throws c10::Error on a sparse gradient, as Python raises RuntimeError.
#pragma once

#include <tuple>
#include <vector>

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

namespace ravnest::training {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  using betas_t = std::tuple<double, double>;
  // torch_optimizer.Lamb's defaults.
  explicit LambOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, clamp_value) = 10;
  TORCH_ARG(bool, adam) = false;
  TORCH_ARG(bool, debias) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lamb : public torch::optim::Optimizer {
 public:
  // Throws c10::Error for the values torch_optimizer.Lamb refuses (lr <= 0, eps < 0, a beta
  // outside [0, 1), weight_decay < 0, clamp_value < 0).
  Lamb(std::vector<torch::Tensor> params, LambOptions defaults);

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace ravnest::training
