// Adam and AdamW that step as Python's torch.optim.Adam and AdamW of the same PyTorch version do
// (their single-tensor path, PyTorch's default for parameters on the CPU).
//
// LibTorch's C++ Adam moves the first moment with mul_(beta1).add_(grad, 1 - beta1); Python's
// Adam in PyTorch 2.x uses exp_avg.lerp_(grad, 1 - beta1). The two agree on the first update and
// differ by an ulp from the second, and Adam turns such differences in near-zero gradients (a
// bias before BatchNorm) into whole steps: a model trained on the daemons drifted 0.02 away from
// the same model trained by one PyTorch 2.15 process in 20 updates. These classes keep
// LibTorch's options, state (AdamParamState: checkpoints and the rings' averaging read it as
// before) and every other line of its step, and take the first-moment update from
// torch_support::python_adam_first_moment.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

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

}  // namespace ravnest::training
