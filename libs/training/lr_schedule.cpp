#include "libs/training/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "libs/training/lamb.h"

namespace ravnest::training {

LrSchedule::LrSchedule(torch::optim::Optimizer& optimizer, std::optional<config::SchedulerSpec> spec)
    : optimizer_(optimizer), spec_(std::move(spec)) {
  for (auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
  apply();
}

namespace {

// OneCycleLR.get_lr for one quantity: the phase holding step `t` and the annealed value between
// its start and end, in the order of PyTorch's operations (the same doubles come out).
// `initial`, `peak`, `low`: the lr's (or momentum's) values at the phases' ends as PyTorch names
// them: phase 1 goes initial -> peak, then (three_phase) peak -> initial, and last -> low.
double one_cycle_value(const config::SchedulerSpec& spec, int64_t t, double initial, double peak,
                       double low) {
  if (t > spec.total_steps) {
    throw std::runtime_error("[scheduler] onecycle: stepped " + std::to_string(t) +
                             " times, more than total_steps = " + std::to_string(spec.total_steps) +
                             " (raise total_steps to the number of " +
                             (spec.per == config::SchedulerPer::kUpdate ? "updates" : "epochs") + ")");
  }
  struct Phase {
    double end_step, start, end;
  };
  const double total = static_cast<double>(spec.total_steps);
  std::vector<Phase> phases;
  if (spec.three_phase) {
    phases = {{spec.pct_start * total - 1, initial, peak},
              {2 * spec.pct_start * total - 2, peak, initial},
              {total - 1, initial, low}};
  } else {
    phases = {{spec.pct_start * total - 1, initial, peak}, {total - 1, peak, low}};
  }
  double start_step = 0;
  const double step = static_cast<double>(t);
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& phase = phases[i];
    if (step <= phase.end_step || i + 1 == phases.size()) {
      const double pct = (step - start_step) / (phase.end_step - start_step);
      if (spec.anneal_strategy == config::AnnealStrategy::kLinear) {
        return (phase.end - phase.start) * pct + phase.start;
      }
      const double cos_out = std::cos(M_PI * pct) + 1;
      return phase.end + (phase.start - phase.end) / 2.0 * cos_out;
    }
    start_step = phase.end_step;
  }
  return low;  // unreachable: the last phase always answers
}

}  // namespace

std::optional<double> LrSchedule::momentum_at(const config::SchedulerSpec& spec, int64_t t) {
  if (spec.name != config::SchedulerName::kOneCycle || !spec.cycle_momentum) return std::nullopt;
  // Momentum runs against the lr: max -> base while the lr rises, back to max as it falls (and,
  // of three phases, the last stays at max): one_cycle_value's shape with initial = max,
  // peak = base, low = max.
  return one_cycle_value(spec, t, spec.max_momentum, spec.base_momentum, spec.max_momentum);
}

double LrSchedule::lr_at(const config::SchedulerSpec& spec, double base_lr, int64_t t) {
  using config::SchedulerName;
  // The operations in the order of torch/optim/lr_scheduler.py's _get_closed_form_lr.
  switch (spec.name) {
    case SchedulerName::kStep:
      return base_lr * std::pow(spec.gamma, static_cast<double>(t / spec.step_size));
    case SchedulerName::kMultiStep: {
      const auto passed = std::upper_bound(spec.milestones.begin(), spec.milestones.end(), t) -
                          spec.milestones.begin();
      return base_lr * std::pow(spec.gamma, static_cast<double>(passed));
    }
    case SchedulerName::kExponential:
      return base_lr * std::pow(spec.gamma, static_cast<double>(t));
    case SchedulerName::kCosine:
      return spec.eta_min + (base_lr - spec.eta_min) *
                                (1 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(spec.t_max))) / 2;
    case SchedulerName::kLinearWarmup: {
      const double end_factor = 1.0;
      return base_lr * (spec.start_factor + (end_factor - spec.start_factor) *
                                                static_cast<double>(std::min(spec.warmup_steps, t)) /
                                                static_cast<double>(spec.warmup_steps));
    }
    case SchedulerName::kWarmupCosine: {
      if (t < spec.warmup_steps) {
        config::SchedulerSpec warmup = spec;
        warmup.name = SchedulerName::kLinearWarmup;
        return lr_at(warmup, base_lr, t);
      }
      config::SchedulerSpec cosine = spec;
      cosine.name = SchedulerName::kCosine;
      return lr_at(cosine, base_lr, t - spec.warmup_steps);
    }
    case SchedulerName::kWarmupLinear: {
      // _get_linear_schedule_with_warmup_lr_lambda, operation for operation (Python's float() of
      // an int, true division, max(0.0, x)); LambdaLR's lr is base_lr * factor.
      const int64_t warmup = spec.warmup_steps, total = spec.total_steps;
      const double factor =
          t < warmup ? static_cast<double>(t) / static_cast<double>(std::max<int64_t>(1, warmup))
                     : std::max(0.0, static_cast<double>(total - t) /
                                         static_cast<double>(std::max<int64_t>(1, total - warmup)));
      return base_lr * factor;
    }
    case SchedulerName::kOneCycle: {
      const double initial = spec.max_lr / spec.div_factor;
      return one_cycle_value(spec, t, initial, spec.max_lr, initial / spec.final_div_factor);
    }
  }
  return base_lr;
}

void LrSchedule::apply() {
  if (!spec_) return;
  auto& groups = optimizer_.param_groups();
  const std::optional<double> momentum = momentum_at(*spec_, steps_);
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    auto& options = groups[i].options();
    options.set_lr(lr_at(*spec_, base_lrs_[i], steps_));
    if (!momentum) continue;
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
      sgd->momentum(*momentum);
    } else if (auto* rmsprop = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) {
      rmsprop->momentum(*momentum);
    } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
      adam->betas({*momentum, std::get<1>(adam->betas())});
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
      adamw->betas({*momentum, std::get<1>(adamw->betas())});
    } else if (auto* lamb = dynamic_cast<LambOptions*>(&options)) {
      // torch_optimizer.Lamb's defaults hold betas: OneCycleLR cycles its beta1 as Adam's.
      lamb->betas({*momentum, std::get<1>(lamb->betas())});
    } else {
      // The job parser refuses cycle_momentum with adagrad; any other optimizer is a new one
      // this switch has not learnt.
      throw std::logic_error("LrSchedule: onecycle's cycle_momentum on an optimizer without momentum or betas");
    }
  }
}

void LrSchedule::step() {
  ++steps_;
  apply();
}

void LrSchedule::restore(int64_t steps) {
  steps_ = steps;
  apply();
}

void LrSchedule::on_update() {
  if (spec_ && spec_->per == config::SchedulerPer::kUpdate) step();
}

void LrSchedule::on_epoch_end() {
  if (spec_ && spec_->per == config::SchedulerPer::kEpoch) step();
}

double LrSchedule::lr() const {
  const auto& groups = optimizer_.param_groups();
  return groups.empty() ? 0.0 : groups.front().options().get_lr();
}

}  // namespace ravnest::training
