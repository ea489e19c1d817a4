// LrSchedule: the job's [scheduler] driving an optimizer's learning rate, with PyTorch's closed
// forms (t = the number of scheduler steps taken so far, base = the lr at construction):
//   step           base * gamma^floor(t / step_size)                         (StepLR)
//   multistep      base * gamma^(number of milestones <= t)                  (MultiStepLR)
//   exponential    base * gamma^t                                            (ExponentialLR)
//   cosine         eta_min + (base - eta_min) * (1 + cos(pi * t / t_max)) / 2  (CosineAnnealingLR;
//                  past t_max it rises again along the cosine, as PyTorch's does)
//   linear_warmup  base * (start_factor + (1 - start_factor) * min(t, warmup_steps) / warmup_steps)
//                                                       (LinearLR with end_factor 1, total_iters
//                                                        = warmup_steps; constant afterwards)
//   warmup_cosine  linear_warmup's lr for t < warmup_steps, then cosine's at t - warmup_steps
//                  (SequentialLR([LinearLR(start_factor, total_iters=W), CosineAnnealingLR(t_max,
//                  eta_min)], milestones=[W]): at the milestone SequentialLR restarts the cosine
//                  at its step 0, i.e. base, so the warm-up's own last value is never used)
//   warmup_linear  base * (t < W ? t / max(1, W) : max(0, (N - t) / max(1, N - W)))  with
//                  W = warmup_steps, N = total_steps: transformers' get_linear_schedule_with_warmup
//                  (a LambdaLR: the factor is computed in doubles as its Python lambda does,
//                  then multiplied into base; 0 from step N on)
//   onecycle       OneCycleLR's phases, each annealed (cos or linear) from its start to its end:
//                  max_lr/div_factor -> max_lr over pct_start * total_steps - 1 steps, then down
//                  to max_lr/div_factor/final_div_factor at total_steps - 1 (three_phase: back
//                  to the start first). The optimizer's own lr is ignored, as PyTorch's does.
//                  With cycle_momentum it also sets the momentum (sgd, rmsprop) or beta1 (adam,
//                  adamw) from max_momentum to base_momentum and back; more than total_steps
//                  steps is an error (std::runtime_error), as PyTorch's ValueError.
// Steps are taken per optimizer update (per = "update") or per epoch (per = "epoch", Ravnest's
// lr_step_on_epoch_change). Without a scheduler the lr stays the optimizer's.
#pragma once

#include <optional>
#include <vector>

#include <torch/optim/optimizer.h>

#include "libs/config/job/job_spec.h"

namespace ravnest::training {

class LrSchedule {
 public:
  // Keeps a reference to `optimizer`, which must outlive it; reads each param group's lr as its
  // base and sets the lr of step 0 at once (linear_warmup starts at start_factor * base).
  LrSchedule(torch::optim::Optimizer& optimizer, std::optional<config::SchedulerSpec> spec);

  // Call after every optimizer step: steps the schedule when per = "update".
  void on_update();
  // Call at the end of every epoch: steps the schedule when per = "epoch".
  void on_epoch_end();
  // One step regardless of `per`.
  void step();
  // As if `steps` steps had been taken (a resumed job): the closed form makes it exact.
  void restore(int64_t steps);

  double lr() const;               // the first param group's current lr
  int64_t steps() const { return steps_; }
  const std::optional<config::SchedulerSpec>& spec() const { return spec_; }

  // The closed form above: the lr after `t` steps from `base_lr`.
  static double lr_at(const config::SchedulerSpec& spec, double base_lr, int64_t t);
  // The momentum (or beta1) after `t` steps: only onecycle with cycle_momentum sets one.
  static std::optional<double> momentum_at(const config::SchedulerSpec& spec, int64_t t);

 private:
  void apply();

  torch::optim::Optimizer& optimizer_;
  std::optional<config::SchedulerSpec> spec_;
  std::vector<double> base_lrs_;
  int64_t steps_ = 0;
};

}  // namespace ravnest::training
