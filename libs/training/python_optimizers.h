// Optimizers that step as Python's torch.optim ones of the same PyTorch version do (their
// single-tensor path, PyTorch's default for parameters on the CPU), where LibTorch's C++ ones
// round otherwise: Adam, AdamW and RMSprop.
//
// LibTorch's C++ Adam moves the first moment with mul_(beta1).add_(grad, 1 - beta1); Python's
// Adam in PyTorch 2.x uses exp_avg.lerp_(grad, 1 - beta1). The two agree on the first update and
// differ by an ulp from the second, and Adam turns such differences in near-zero gradients (a
// bias before BatchNorm) into whole steps: a model trained on the daemons drifted 0.02 away from
// the same model trained by one PyTorch 2.15 process in 20 updates. These classes keep
// LibTorch's options, state (AdamParamState: checkpoints and the rings' averaging read it as
// before) and every other line of its step, and take the first-moment update from
// torch_support::python_running_average.
//
// RMSprop with `centered`: LibTorch's C++ moves the gradient's average with
// grad_avg.mul_(alpha).add_(grad, 1 - alpha), Python's in PyTorch 2.x with
// grad_avg.lerp_(grad, 1 - alpha); the centered denominator sqrt(square_avg - grad_avg^2)
// cancels, so the ulp becomes 2.5e-4 in a small CNN's conv bias after 5 updates (test_training
// on LibTorch 2.15). PythonRMSprop keeps LibTorch's options and state (RMSpropParamState) and
// takes that update from torch_support::python_running_average.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>

namespace ravnest::training {

class PythonAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class PythonAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class PythonRMSprop : public torch::optim::RMSprop {
 public:
  using torch::optim::RMSprop::RMSprop;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ravnest::training
