#include "libs/training/outer_optimizer.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::training {

void sgd_step(at::Tensor& param, at::Tensor& buf, const at::Tensor& grad, double lr, double momentum,
              bool nesterov) {
  // The very operations of torch/optim/sgd.py (1.13), so that the bits agree with it.
  at::Tensor d_p = grad;
  if (momentum != 0) {
    if (!buf.defined()) {
      buf = grad.clone().detach();
    } else {
      buf.mul_(momentum).add_(grad, /*alpha=*/1);
    }
    d_p = nesterov ? d_p.add(buf, momentum) : buf;
  }
  param.add_(d_p, -lr);
}

OuterOptimizer::OuterOptimizer(config::OuterSpec spec,
                               std::vector<std::pair<std::string, at::Tensor>> live)
    : spec_(spec), live_(std::move(live)), momentum_(live_.size()) {
  reset_to_live();
}

void OuterOptimizer::reset_to_live() {
  torch::NoGradGuard no_grad;
  global_.clear();
  for (const auto& [name, t] : live_) global_.push_back(t.detach().clone());
  momentum_.assign(live_.size(), at::Tensor());
}

bool OuterOptimizer::due(uint64_t updates, bool last) const {
  return last || updates % static_cast<uint64_t>(spec_.every) == 0;
}

std::vector<at::Tensor> OuterOptimizer::deltas() const {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < live_.size(); ++i) out.push_back(global_[i].sub(live_[i].second.detach()));
  return out;
}

void OuterOptimizer::step(const std::vector<at::Tensor>& averaged) {
  if (averaged.size() != live_.size()) {
    throw std::invalid_argument("outer step: " + std::to_string(averaged.size()) + " averages for " +
                                std::to_string(live_.size()) + " parameters");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    sgd_step(global_[i], momentum_[i], averaged[i], spec_.lr, spec_.momentum, spec_.nesterov());
    live_[i].second.detach().copy_(global_[i]);
  }
}

std::vector<std::pair<std::string, at::Tensor>> OuterOptimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < live_.size(); ++i) {
    out.emplace_back("global." + live_[i].first, global_[i]);
    if (momentum_[i].defined()) out.emplace_back("momentum." + live_[i].first, momentum_[i]);
  }
  return out;
}

void OuterOptimizer::restore(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    for (const auto& [name, t] : state) {
      if (name == "global." + live_[i].first) global_[i].copy_(t);
      if (name == "momentum." + live_[i].first) momentum_[i] = t.to(global_[i].device()).clone();
    }
  }
}

}  // namespace ravnest::training
