#include "libs/training/grad_scaler.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/utils.h>  // torch::NoGradGuard

namespace ravnest::training {

bool GradScaler::unscale(const std::vector<at::Tensor>& grads) const {
  torch::NoGradGuard no_grad;
  // PyTorch: inv_scale = scale.double().reciprocal().float().
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(static_cast<float>(scale_)));
  bool found = false;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    at::Tensor grad = g.detach();
    if (!found && !at::isfinite(grad).all().item<bool>()) found = true;
    grad.mul_(inv_scale);
  }
  return found;
}

void GradScaler::update(bool found_inf) {
  // The scale is a float32 tensor in PyTorch: every product is rounded to float.
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // PyTorch does not grow into inf
    growth_tracker_ = 0;
  }
}

}  // namespace ravnest::training
