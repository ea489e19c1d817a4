#include "libs/training/optimizer.h"

#include <unordered_set>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "libs/torch_support/torch_compat.h"
#include "libs/training/grad_clip.h"
#include "libs/training/lamb.h"
#include "libs/training/python_optimizers.h"

namespace ravnest::training {

std::vector<at::Tensor> unique_trainable(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : parameters) {
    if (!p.defined() || !p.requires_grad()) continue;
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

std::vector<at::Tensor> optimized_parameters(const stage::Stage& stage,
                                             const config::NodeMetadata& node) {
  std::unordered_set<std::string> tables;
  for (const auto& t : node.parameter_server.sparse_tables) tables.insert(t.weight);
  std::vector<at::Tensor> parameters;
  for (const auto& p : stage.named_parameters()) {
    if (!tables.count(p.name)) parameters.push_back(p.value);
  }
  return parameters;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimizerSpec& spec,
                                                        const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> params = unique_trainable(parameters);
  using config::OptimizerName;
  switch (spec.name) {
    case OptimizerName::kSgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(spec.lr)
                      .momentum(spec.momentum)
                      .dampening(spec.dampening)
                      .weight_decay(spec.weight_decay)
                      .nesterov(spec.nesterov));
    case OptimizerName::kAdam:
      return std::make_unique<PythonAdam>(
          params, torch::optim::AdamOptions(spec.lr)
                      .betas(std::make_tuple(spec.betas.first, spec.betas.second))
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .amsgrad(spec.amsgrad));
    case OptimizerName::kAdamW:
      return std::make_unique<PythonAdamW>(
          params, torch::optim::AdamWOptions(spec.lr)
                      .betas(std::make_tuple(spec.betas.first, spec.betas.second))
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .amsgrad(spec.amsgrad));
    case OptimizerName::kRmsprop:
      return std::make_unique<PythonRMSprop>(
          params, torch::optim::RMSpropOptions(spec.lr)
                      .alpha(spec.alpha)
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .momentum(spec.momentum)
                      .centered(spec.centered));
    case OptimizerName::kAdagrad:
      return std::make_unique<torch::optim::Adagrad>(
          params, torch::optim::AdagradOptions(spec.lr)
                      .lr_decay(spec.lr_decay)
                      .weight_decay(spec.weight_decay)
                      .initial_accumulator_value(spec.initial_accumulator_value)
                      .eps(spec.eps));
    case OptimizerName::kLamb:
      return std::make_unique<Lamb>(
          params, LambOptions(spec.lr)
                      .betas(std::make_tuple(spec.betas.first, spec.betas.second))
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .clamp_value(spec.clamp_value)
                      .adam(spec.adam)
                      .debias(spec.debias));
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

}  // namespace ravnest::training

namespace ravnest::training {

std::vector<at::Tensor> optimizer_state_tensors(torch::optim::Optimizer& optimizer,
                                                const at::Tensor& parameter) {
  auto& state = optimizer.state();
  auto it = state.find(torch_support::optimizer_state_key(parameter));
  if (it == state.end()) return {};
  std::vector<at::Tensor> out;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) out.push_back(t);
  };
  auto* s = it->second.get();
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(s)) {
    add(sgd->momentum_buffer());
  } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(s)) {
    add(adam->exp_avg());
    add(adam->exp_avg_sq());
    add(adam->max_exp_avg_sq());
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(s)) {
    add(adamw->exp_avg());
    add(adamw->exp_avg_sq());
    add(adamw->max_exp_avg_sq());
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropParamState*>(s)) {
    add(rms->square_avg());
    add(rms->momentum_buffer());
    add(rms->grad_avg());
  } else if (auto* adagrad = dynamic_cast<torch::optim::AdagradParamState*>(s)) {
    add(adagrad->sum());
  } else if (auto* lamb = dynamic_cast<LambParamState*>(s)) {
    add(lamb->exp_avg());
    add(lamb->exp_avg_sq());
  }
  return out;
}

void clip_as_job_says(const config::TrainSpec& train, torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) grads.push_back(p.grad());
  }
  if (train.grad_clip_value) clip_gradients_by_value(grads, *train.grad_clip_value);
  if (train.grad_clip_norm) clip_grad_norm(grads, *train.grad_clip_norm, train.grad_clip_norm_type);
}

}  // namespace ravnest::training
