#include "libs/runtime/optimizer.h"

#include <unordered_set>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

namespace ravnest::runtime {

std::vector<at::Tensor> unique_trainable(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : parameters) {
    if (!p.defined() || !p.requires_grad()) continue;
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
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
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(spec.lr)
                      .betas(std::make_tuple(spec.betas.first, spec.betas.second))
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .amsgrad(spec.amsgrad));
    case OptimizerName::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(spec.lr)
                      .betas(std::make_tuple(spec.betas.first, spec.betas.second))
                      .eps(spec.eps)
                      .weight_decay(spec.weight_decay)
                      .amsgrad(spec.amsgrad));
    case OptimizerName::kRmsprop:
      return std::make_unique<torch::optim::RMSprop>(
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
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

}  // namespace ravnest::runtime
