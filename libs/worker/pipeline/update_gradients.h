// UpdateGradients: what a stage does to its gradients between the last backward of an update and
// the optimizer's step, when the job asks for it ([train] grad_clip_norm, grad_clip_value,
// autocast = "fp16"), so that the whole pipeline steps as one process would:
//   1. fp16: the gradients are divided by the loss scale (the leaf multiplied the loss by
//      loss_scale()), noting whether any is inf or nan (GradScaler::unscale);
//   2. grad_clip_value: clamped (clip_grad_value_);
//   3. grad_clip_norm: each gradient's norm taken here; the stages of the cluster exchange theirs
//      and their inf/nan flags over one ring (planner::cluster_stage_ring): each stage adds its
//      values into its own slots of a vector of zeros and the ring sums, which copies them
//      exactly (x + 0 = x). Every stage then stacks all the norms in pipeline order (the
//      model's parameter order) and computes the same total and coefficient as clip_grad_norm_.
//   4. The step is skipped on every stage when any stage found an inf or nan; the scale backs
//      off (or grows) alike everywhere.
// Gradients across clusters are averaged before (reduce = "gradients"), so the norm is the one of
// the averaged gradient, as under DistributedDataParallel; with reduce = "parameters" each
// cluster clips its own. A parameter shared by several stages counts once (at its first holder).
//
// Part of a StageWorker; compute thread only. prepare() blocks in WorkerPort::reduce_rings (only
// when the cluster has more than one stage and there is something to exchange) and throws what
// it throws.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/training/grad_scaler.h"
#include "libs/worker/worker_port.h"
#include "libs/worker/worker_setup.h"

namespace ravnest::worker {

class UpdateGradients {
 public:
  UpdateGradients(const WorkerSetup& setup, WorkerPort& port);

  // The leaf's loss is multiplied by this before its backward (1 without fp16).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // Before the optimizer's step: returns false when the step must be skipped on every stage.
  bool prepare();
  // After the step (taken or skipped): the scaler's update.
  void after_step(bool stepped);
  // fp16's scaler, for checkpoints (null without fp16).
  training::GradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }

 private:
  std::vector<at::Tensor> gradients() const;
  // Sums `local` (this position's values in place, zeros elsewhere) with the other stages.
  at::Tensor exchange(at::Tensor local);

  const WorkerSetup& setup_;
  WorkerPort& port_;
  config::RingMembership ring_;
  uint64_t round_ = 0;
  std::optional<std::vector<int64_t>> norm_counts_;  // per position, exchanged once
  std::optional<training::GradScaler> scaler_;
};

}  // namespace ravnest::worker
