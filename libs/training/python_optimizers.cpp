#include "libs/training/python_optimizers.h"

#include <cmath>
#include <functional>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/torch_support/torch_compat.h"

namespace ravnest::training {

namespace {

// One Adam step over `group`'s parameters; `decoupled` is AdamW's weight decay. `State` is
// AdamParamState or AdamWParamState, `Options` AdamOptions or AdamWOptions: the same fields.
template <typename State, typename Options, typename StateMap>
void adam_step(torch::optim::OptimizerParamGroup& group, StateMap& states, bool decoupled) {
  auto& options = static_cast<Options&>(group.options());
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto grad = p.grad();
    TORCH_CHECK(!grad.is_sparse(), "Adam does not support sparse gradients");
    auto& state = torch_support::optimizer_state<State>(states, p, [&]() {
      auto fresh = std::make_unique<State>();
      fresh->step(0);
      fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (options.amsgrad()) fresh->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      return fresh;
    });
    auto& exp_avg = state.exp_avg();
    auto& exp_avg_sq = state.exp_avg_sq();
    auto& max_exp_avg_sq = state.max_exp_avg_sq();

    state.step(state.step() + 1);
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const double bias_correction1 = 1 - std::pow(beta1, state.step());
    const double bias_correction2 = 1 - std::pow(beta2, state.step());

    if (options.weight_decay() != 0) {
      if (decoupled) {
        p.mul_(1 - options.lr() * options.weight_decay());
      } else {
        grad = grad.add(p, options.weight_decay());
      }
    }
    torch_support::python_running_average(exp_avg, grad, beta1);
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);

    at::Tensor denom;
    if (options.amsgrad()) {
      at::max_out(max_exp_avg_sq, exp_avg_sq, max_exp_avg_sq);
      denom = (max_exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options.eps());
    } else {
      denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options.eps());
    }
    const double step_size = options.lr() / bias_correction1;
    p.addcdiv_(exp_avg, denom, -step_size);
  }
}

// One RMSprop step over `group`'s parameters, LibTorch's but for the gradient's average.
template <typename StateMap>
void rmsprop_step(torch::optim::OptimizerParamGroup& group, StateMap& states) {
  auto& options = static_cast<torch::optim::RMSpropOptions&>(group.options());
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto grad = p.grad();
    TORCH_CHECK(!grad.is_sparse(), "RMSprop does not support sparse gradients");
    using State = torch::optim::RMSpropParamState;
    auto& state = torch_support::optimizer_state<State>(states, p, [&]() {
      auto fresh = std::make_unique<State>();
      fresh->step(0);
      fresh->square_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (options.momentum() > 0) {
        fresh->momentum_buffer(at::zeros_like(p, at::MemoryFormat::Preserve));
      }
      if (options.centered()) fresh->grad_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      return fresh;
    });
    auto& square_avg = state.square_avg();
    const double alpha = options.alpha();
    state.step(state.step() + 1);
    if (options.weight_decay() != 0) grad = grad.add(p, options.weight_decay());
    square_avg.mul_(alpha).addcmul_(grad, grad, 1 - alpha);
    at::Tensor avg;
    if (options.centered()) {
      auto& grad_avg = state.grad_avg();
      torch_support::python_running_average(grad_avg, grad, alpha);
      avg = square_avg.addcmul(grad_avg, grad_avg, -1).sqrt_().add_(options.eps());
    } else {
      avg = square_avg.sqrt().add_(options.eps());
    }
    if (options.momentum() > 0) {
      auto& buf = state.momentum_buffer();
      buf.mul_(options.momentum()).addcdiv_(grad, avg);
      p.add_(buf, -options.lr());
    } else {
      p.addcdiv_(grad, avg, -options.lr());
    }
  }
}

template <typename Optimizer>
torch::Tensor run_step(Optimizer& optimizer, torch::optim::Optimizer::LossClosure& closure,
                       const std::function<void(torch::optim::OptimizerParamGroup&)>& step) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : optimizer.param_groups()) step(group);
  return loss;
}

}  // namespace

torch::Tensor PythonAdam::step(LossClosure closure) {
  return run_step(*this, closure, [&](torch::optim::OptimizerParamGroup& group) {
    adam_step<torch::optim::AdamParamState, torch::optim::AdamOptions>(group, state_, false);
  });
}

torch::Tensor PythonAdamW::step(LossClosure closure) {
  return run_step(*this, closure, [&](torch::optim::OptimizerParamGroup& group) {
    adam_step<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(group, state_, true);
  });
}

torch::Tensor PythonRMSprop::step(LossClosure closure) {
  return run_step(*this, closure, [&](torch::optim::OptimizerParamGroup& group) {
    rmsprop_step(group, state_);
  });
}

}  // namespace ravnest::training
