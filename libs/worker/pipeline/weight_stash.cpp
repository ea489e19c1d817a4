#include "libs/worker/pipeline/weight_stash.h"

#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::worker {

WeightStash::WeightStash(std::shared_ptr<stage::Stage> stage) : stage_(std::move(stage)) {
  for (const auto& p : stage_->parameters()) parameters_.push_back(p);
}

void WeightStash::hold(uint64_t version) { ++holds_[version]; }

void WeightStash::release(uint64_t version) {
  auto it = holds_.find(version);
  if (it == holds_.end()) return;
  if (--it->second > 0) return;
  holds_.erase(it);
  kept_.erase(version);
}

void WeightStash::before_update() {
  if (!holds_.count(version_) || kept_.count(version_)) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> copy;
  copy.reserve(parameters_.size());
  for (const auto& p : parameters_) copy.push_back(p.detach().clone());
  kept_.emplace(version_, std::move(copy));
}

void WeightStash::with_version(uint64_t version,
                               const std::function<void(stage::Stage&)>& body) {
  if (version == version_) return body(*stage_);
  auto kept = kept_.find(version);
  if (kept == kept_.end()) {
    throw std::logic_error("weights of version " + std::to_string(version) +
                           " were not kept (current " + std::to_string(version_) + ")");
  }
  if (!shadow_) {
    {
      // With autograd on, the copies would be results of clone(), not leaves: no .grad.
      torch::NoGradGuard no_grad;
      shadow_ = stage_->deepcopy();
    }
    for (const auto& p : shadow_->parameters()) shadow_parameters_.push_back(p);
    if (shadow_parameters_.size() != parameters_.size()) {
      throw std::logic_error("the stage's copy has other parameters");
    }
    for (size_t i = 0; i < parameters_.size(); ++i) {
      shadow_parameters_[i].requires_grad_(parameters_[i].requires_grad());
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters_.size(); ++i) shadow_parameters_[i].copy_(kept->second[i]);
  }
  // However `body` ends, the shadow keeps no gradient for the next time.
  struct ClearGrads {
    std::vector<at::Tensor>& parameters;
    ~ClearGrads() {
      for (auto& p : parameters) p.mutable_grad() = at::Tensor();
    }
  } clear{shadow_parameters_};
  body(*shadow_);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& grad = shadow_parameters_[i].grad();
    if (!grad.defined()) continue;
    at::Tensor& into = parameters_[i].mutable_grad();
    if (into.defined()) {
      into.add_(grad);
    } else {
      into = grad.detach().clone();
    }
  }
}

double WeightStash::checksum(const stage::Stage& module) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const auto& p : module.parameters()) sum += p.to(at::kDouble).sum().item<double>();
  return sum;
}

}  // namespace ravnest::worker
