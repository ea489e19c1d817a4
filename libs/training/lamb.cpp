#include "libs/training/lamb.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/serialize/archive.h>

#include "libs/torch_support/torch_compat.h"

namespace ravnest::training {

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(clamp_value);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adam);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(debias);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, clamp_value);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adam);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, debias);
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

Lamb::Lamb(std::vector<torch::Tensor> params, LambOptions defaults)
    : torch::optim::Optimizer(std::move(params), std::make_unique<LambOptions>(defaults)) {
  // torch_optimizer.Lamb.__init__'s checks, in its order.
  TORCH_CHECK(defaults.lr() > 0, "Invalid learning rate: ", defaults.lr());
  TORCH_CHECK(defaults.eps() >= 0, "Invalid epsilon value: ", defaults.eps());
  const auto [beta1, beta2] = defaults.betas();
  TORCH_CHECK(0 <= beta1 && beta1 < 1, "Invalid beta parameter at index 0: ", beta1);
  TORCH_CHECK(0 <= beta2 && beta2 < 1, "Invalid beta parameter at index 1: ", beta2);
  TORCH_CHECK(defaults.weight_decay() >= 0, "Invalid weight_decay value: ", defaults.weight_decay());
  TORCH_CHECK(defaults.clamp_value() >= 0, "Invalid clamp value: ", defaults.clamp_value());
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    const auto [beta1, beta2] = options.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::Tensor grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(),
                  "Lamb does not support sparse gradients, please consider SparseAdam instead");
      auto& state = torch_support::optimizer_state<LambParamState>(state_, p, [&]() {
        auto fresh = std::make_unique<LambParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        return fresh;
      });
      at::Tensor& exp_avg = state.exp_avg();
      at::Tensor& exp_avg_sq = state.exp_avg_sq();
      state.step(state.step() + 1);

      exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);

      // Python: math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step), in doubles.
      double bias_correction = 1;
      if (options.debias()) {
        const auto t = static_cast<double>(state.step());
        bias_correction = std::sqrt(1 - std::pow(beta2, t));
        bias_correction /= 1 - std::pow(beta1, t);
      }
      const double step_size = options.lr() * bias_correction;

      const at::Tensor weight_norm = torch_support::python_norm(p).clamp(0, options.clamp_value());
      at::Tensor adam_step = exp_avg / exp_avg_sq.sqrt().add(options.eps());
      if (options.weight_decay() != 0) adam_step.add_(p, options.weight_decay());
      const at::Tensor adam_norm = torch_support::python_norm(adam_step);

      // Python: alpha = -step_size * trust_ratio, where trust_ratio is the int 1 or a 0-dim
      // tensor of p's dtype: then the product is that tensor's dtype, rounded once, and add_
      // takes it back as a number.
      at::Scalar alpha = -step_size;
      const bool unit_trust = options.adam() || weight_norm.item<double>() == 0 ||
                              adam_norm.item<double>() == 0;
      if (!unit_trust) alpha = (weight_norm / adam_norm).mul(-step_size).item();
      p.add_(adam_step, alpha);
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void Lamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

}  // namespace ravnest::training
