// OuterStep: a stage's part of DiLoCo ([outer], config/job/outer_spec.h; docs/data-parallel.md):
// the stage's trainable floating parameters' theta_global and outer momentum
// (training::OuterOptimizer), and the outer step every `every` updates and after the last one:
// theta_global - theta_local averaged over the stage's cross-cluster rings (with the stage's
// buffers, as every parameter average takes them), the outer SGD/Nesterov step on
// theta_global, and theta_global copied into the live parameters. The inner optimizer's state
// stays this cluster's own. With one cluster (no rings) the step uses this cluster's delta alone.
//
// Part of a StageWorker; compute thread only; blocks in the rings (StageRings) and throws what
// they throw.
#pragma once

#include <functional>
#include <memory>

#include "libs/training/outer_optimizer.h"
#include "libs/worker/pipeline/stage_rings.h"
#include "libs/worker/worker_setup.h"

namespace ravnest::worker {

class OuterStep {
 public:
  OuterStep(const WorkerSetup& setup, StageRings& rings);

  bool due(uint64_t updates, bool last) const { return optimizer_->due(updates, last); }
  // The outer step; the weights change inside `change_weights` (under async: a new version).
  void run(const std::function<void(const std::function<void()>&)>& change_weights);

  training::OuterOptimizer& optimizer() { return *optimizer_; }

 private:
  const WorkerSetup& setup_;
  StageRings& rings_;
  std::unique_ptr<training::OuterOptimizer> optimizer_;
  std::vector<std::vector<std::string>> names_;  // per tracked tensor: its names (tied ones too)
};

}  // namespace ravnest::worker
