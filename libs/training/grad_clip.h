// Gradient clipping as torch.nn.utils.clip_grad_norm_ and clip_grad_value_ compute it, cut in
// the parts a pipeline needs: each stage takes the norm of each of its gradients
// (gradient_norms), the stages exchange these (worker/pipeline/update_gradients.h), and every
// stage then computes the same total over all of them in the model's order (total_norm), the
// same coefficient (clip_coefficient) and scales its own gradients (scale_gradients). In one
// process clip_grad_norm does all of it, as PyTorch's function does.
//
// PyTorch's arithmetic, step for step (1.13 and 2.x alike): per gradient
// linalg.vector_norm(g, p); total = vector_norm(stack(norms), p) (for p = inf the largest, the
// same value); coef = clamp(max_norm / (total + 1e-6), max=1) as a tensor; g.mul_(coef).
// Undefined gradients are skipped, as PyTorch skips None. Any thread; throws what LibTorch throws.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::training {

// Each gradient's norm of type `norm_type` (a 0-dim tensor on its device), in `grads`' order.
std::vector<at::Tensor> gradient_norms(const std::vector<at::Tensor>& grads, double norm_type);
// The norm of the stacked per-gradient norms, on `norms`' device; 0 when there are none.
at::Tensor total_norm(const std::vector<at::Tensor>& norms, double norm_type);
// min(1, max_norm / (total + 1e-6)), as a 0-dim tensor of total's dtype.
at::Tensor clip_coefficient(const at::Tensor& total, double max_norm);
// g.mul_(coefficient) for every defined gradient.
void scale_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& coefficient);
// clip_grad_value_: every element into [-clip_value, clip_value].
void clip_gradients_by_value(const std::vector<at::Tensor>& grads, double clip_value);
// clip_grad_norm_ over `grads` in one process; returns the total norm.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, double norm_type);

}  // namespace ravnest::training
