#include "libs/training/grad_clip.h"

#include <ATen/ATen.h>
#include <torch/utils.h>  // torch::NoGradGuard

namespace ravnest::training {

std::vector<at::Tensor> gradient_norms(const std::vector<at::Tensor>& grads, double norm_type) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) {
    if (g.defined()) norms.push_back(at::linalg_vector_norm(g.detach(), norm_type));
  }
  return norms;
}

at::Tensor total_norm(const std::vector<at::Tensor>& norms, double norm_type) {
  torch::NoGradGuard no_grad;
  if (norms.empty()) return at::zeros({});
  return at::linalg_vector_norm(at::stack(norms), norm_type);
}

at::Tensor clip_coefficient(const at::Tensor& total, double max_norm) {
  torch::NoGradGuard no_grad;
  // Python's `max_norm / (total_norm + 1e-6)` is Tensor.__rdiv__: reciprocal, then times.
  return at::clamp_max((total + 1e-6).reciprocal() * max_norm, 1.0);
}

void scale_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& coefficient) {
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) {
    if (g.defined()) g.detach().mul_(coefficient.to(g.device()));
  }
}

void clip_gradients_by_value(const std::vector<at::Tensor>& grads, double clip_value) {
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) {
    if (g.defined()) g.detach().clamp_(-clip_value, clip_value);
  }
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, double norm_type) {
  at::Tensor total = total_norm(gradient_norms(grads, norm_type), norm_type);
  scale_gradients(grads, clip_coefficient(total, max_norm));
  return total;
}

}  // namespace ravnest::training
