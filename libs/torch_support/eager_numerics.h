// EagerNumerics: while one exists, TorchScript runs the way eager PyTorch computes, without the
// graph executor's optimizations (torch::jit::GraphOptimizerEnabledGuard(false)).
//
// Why: from its second run on, the profiling executor rewrites a graph that needs gradients into
// autodiff subgraphs whose backward formulas differ from eager autograd in the last bits, and
// which subgraphs it forms depends on the whole graph. A stage is a different graph than the
// whole model, so with optimizations on, a pipeline and one process drift apart after the first
// step (Inception v3 by 1e-3 within 4 Adam steps). With them off, each stage, the whole model
// (reference trainer, --verify, evaluate) and eager PyTorch compute alike.
//
// LibTorch keeps the setting per thread: create the guard on the thread that runs the modules.
// It restores the previous setting on destruction.
#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>

namespace ravnest::torch_support {

class EagerNumerics {
 public:
  EagerNumerics() : guard_(false) {}
  EagerNumerics(const EagerNumerics&) = delete;
  EagerNumerics& operator=(const EagerNumerics&) = delete;

 private:
  torch::jit::GraphOptimizerEnabledGuard guard_;
};

}  // namespace ravnest::torch_support
