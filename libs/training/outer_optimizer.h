// OuterOptimizer: DiLoCo's outer step (Douillard et al. 2023, arXiv 2311.08105; the job's
// [outer], config/job/outer_spec.h) over a list of named live tensors, the trainable floating
// parameters a worker (or the reference trainer's copy) trains.
//
// It keeps theta_global, a copy of the live tensors as the last outer step left them, and the
// outer momentum. deltas() is the outer gradient theta_global - theta_live of this copy; once the
// caller has averaged it over the copies, step() applies it exactly as
// torch.optim.SGD(lr, momentum, nesterov, dampening 0, weight_decay 0).step() would with
// theta_global as the parameters and the average as their .grad, then copies theta_global into
// the live tensors (which every copy then holds alike). The inner optimizer is not touched.
//
// Not thread-safe; the tensors stay on the live tensors' device. step() throws
// std::invalid_argument when the averages do not match the tensors in number.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/job/outer_spec.h"

namespace ravnest::training {

// One tensor of torch.optim.SGD's step (PyTorch 1.13 _single_tensor_sgd, no weight decay, no
// dampening): buf = grad on the first step (buf undefined), else buf = momentum*buf + grad;
// grad' = grad + momentum*buf with nesterov, else buf; param -= lr*grad'. With momentum 0, no
// buffer: param -= lr*grad. `param` and `buf` change in place (buf is assigned on the first step).
void sgd_step(at::Tensor& param, at::Tensor& buf, const at::Tensor& grad, double lr, double momentum,
              bool nesterov);

class OuterOptimizer {
 public:
  // theta_global starts as a copy of `live` (names are what checkpoints keep them under).
  OuterOptimizer(config::OuterSpec spec, std::vector<std::pair<std::string, at::Tensor>> live);

  const config::OuterSpec& spec() const { return spec_; }
  // Whether `updates` (inner optimizer updates so far) ends an outer round: every `every`
  // updates, and after the last one (`last`) so that the job ends on an outer step.
  bool due(uint64_t updates, bool last) const;

  // New tensors: theta_global - live, in the order of the live tensors.
  std::vector<at::Tensor> deltas() const;
  // The outer step on the averaged deltas, then live = theta_global.
  void step(const std::vector<at::Tensor>& averaged);

  // For checkpoints: "global.<name>" and, once a step has made them, "momentum.<name>" (the
  // tensors themselves: copy before changing). restore() takes what state() gave; names it
  // lacks keep their value (a checkpoint from before [outer] was kept: theta_global = live).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  void restore(const std::vector<std::pair<std::string, at::Tensor>>& state);
  // theta_global := live, momentum forgotten: what a job that resumes from a checkpoint without
  // outer state starts from.
  void reset_to_live();

 private:
  config::OuterSpec spec_;
  std::vector<std::pair<std::string, at::Tensor>> live_;
  std::vector<at::Tensor> global_;
  std::vector<at::Tensor> momentum_;  // undefined until the first step (momentum > 0)
};

}  // namespace ravnest::training
