#include "libs/training/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ravnest::training {

LrSchedule::LrSchedule(torch::optim::Optimizer& optimizer, std::optional<config::SchedulerSpec> spec)
    : optimizer_(optimizer), spec_(std::move(spec)) {
  for (auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
  apply();
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
  }
  return base_lr;
}

void LrSchedule::apply() {
  if (!spec_) return;
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(lr_at(*spec_, base_lrs_[i], steps_));
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
