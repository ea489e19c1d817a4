// The cost model of docs/planner.md: stage_cost() and its prefix-sum form for the partitioner.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "libs/planner/cluster_plan.h"
#include "libs/planner/planner_internal.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::planner {
namespace detail {

void validate_profile(const ModelProfile& profile) {
  const size_t n = profile.units.size();
  if (n == 0) throw std::invalid_argument("model profile has no units");
  if (profile.boundary_bytes.size() != n - 1) {
    throw std::invalid_argument("model profile: boundary_bytes has " +
                                std::to_string(profile.boundary_bytes.size()) +
                                " entries, expected " + std::to_string(n - 1));
  }
  if (profile.cut_allowed.size() != n - 1) {
    throw std::invalid_argument("model profile: cut_allowed has " +
                                std::to_string(profile.cut_allowed.size()) + " entries, expected " +
                                std::to_string(n - 1));
  }
  if (profile.batch_size < 1) throw std::invalid_argument("model profile: batch_size must be >= 1");
  if (profile.input_bytes < 0 || profile.output_bytes < 0) {
    throw std::invalid_argument("model profile: input_bytes and output_bytes must be >= 0");
  }
  for (size_t i = 0; i < n; ++i) {
    const Unit& u = profile.units[i];
    if (!(u.memory_scale > 0) || !std::isfinite(u.memory_scale)) {
      throw std::invalid_argument("model profile: unit " + std::to_string(i) + " (" + u.label +
                                  ") has a memory_scale that is not a positive number");
    }
    if (!(u.forward_seconds >= 0) || !std::isfinite(u.forward_seconds) || u.parameter_bytes < 0 ||
        u.trainable_bytes < 0 || u.activation_bytes < 0) {
      throw std::invalid_argument("model profile: unit " + std::to_string(i) + " (" + u.label +
                                  ") has a negative or non-finite figure");
    }
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    if (profile.boundary_bytes[i] < 0) {
      throw std::invalid_argument("model profile: boundary_bytes[" + std::to_string(i) +
                                  "] is negative");
    }
  }
}

double speed_factor(const config::NodeConfig& node, double reference_gflops) {
  if (node.gflops > 0 && reference_gflops > 0) return reference_gflops / node.gflops;
  return 1.0;
}

double reference_gflops_of(const std::vector<config::NodeConfig>& pool) {
  double sum = 0;
  int count = 0;
  for (const auto& node : pool) {
    if (node.gflops > 0) {
      sum += node.gflops;
      ++count;
    }
  }
  return count == 0 ? 0.0 : sum / count;
}

int64_t unit_memory_bytes(const Unit& u, int64_t stash_versions) {
  const int64_t bytes = u.parameter_bytes + u.trainable_bytes + 2 * u.trainable_bytes +
                        u.activation_bytes + stash_versions * u.trainable_bytes;
  if (u.memory_scale == 1.0) return bytes;
  return static_cast<int64_t>(std::llround(static_cast<double>(bytes) * u.memory_scale));
}

int64_t raw_stage_bytes(const ModelProfile& profile, size_t first, size_t end,
                        int64_t stash_versions) {
  int64_t raw = first == 0 ? profile.input_bytes : profile.boundary_bytes[first - 1];
  for (size_t i = first; i < end; ++i) raw += unit_memory_bytes(profile.units[i], stash_versions);
  return raw;
}

int64_t raw_capacity(double ram_bytes) {
  if (!(ram_bytes > 0)) return -1;
  constexpr double kMax = 4e18;
  if (ram_bytes >= kMax) return static_cast<int64_t>(kMax / kHeadroom);
  auto x = static_cast<int64_t>(std::floor(ram_bytes / kHeadroom));
  while (static_cast<double>(x + 1) * kHeadroom <= ram_bytes) ++x;
  while (x >= 0 && static_cast<double>(x) * kHeadroom > ram_bytes) --x;
  return x;
}

Prepared::Prepared(const ModelProfile& profile, int64_t stash_versions) {
  validate_profile(profile);
  n = profile.units.size();
  batch_size = profile.batch_size;
  forward.assign(n + 1, 0.0);
  memory.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const Unit& u = profile.units[i];
    forward[i + 1] = forward[i] + u.forward_seconds;
    memory[i + 1] = memory[i] + unit_memory_bytes(u, stash_versions);
  }
  start_bytes.assign(n + 1, 0);
  grad_bytes.assign(n + 1, 0);
  send_bytes.assign(n + 1, 0);
  cut_ok.assign(n + 1, 0);
  cut_ok[0] = cut_ok[n] = 1;
  min_cut_bytes = -1;
  max_stages = 1;
  for (size_t p = 0; p <= n; ++p) {
    const int64_t boundary = (p > 0 && p < n) ? profile.boundary_bytes[p - 1] : 0;
    start_bytes[p] = memory[p] - (p == 0 ? profile.input_bytes : boundary);
    grad_bytes[p] = boundary;
    send_bytes[p] = boundary;
    if (p > 0 && p < n && profile.cut_allowed[p - 1]) {
      cut_ok[p] = 1;
      ++max_stages;
      if (min_cut_bytes < 0 || boundary < min_cut_bytes) min_cut_bytes = boundary;
    }
  }
  if (min_cut_bytes < 0) min_cut_bytes = 0;
  size_t begin = 0;
  for (size_t p = 1; p <= n; ++p) {
    if (cut_ok[p]) {
      segments.emplace_back(begin, p);
      begin = p;
    }
  }
}

NodeModel NodeModel::of(const config::NodeConfig& node, double reference_gflops,
                        const PlanningOptions& options) {
  if (!(node.bandwidth_mbps > 0) || !(node.ram_gb > 0)) {
    const std::string name = node.name.empty() ? config::node_name(node.id) : node.name;
    throw std::invalid_argument(name + ": ram and bandwidth must be positive");
  }
  NodeModel model;
  model.alpha = kComputeFactor * speed_factor(node, reference_gflops);
  model.beta = codec_bytes_factor(options.activations) / node.bandwidth_bytes_per_second();
  model.beta_back = codec_bytes_factor(options.gradients) / node.bandwidth_bytes_per_second();
  model.capacity = raw_capacity(node.ram_bytes());
  if (model.capacity >= 0) model.capacity -= std::max<int64_t>(options.stage_baseline_bytes, 0);
  if (model.capacity < 0) model.capacity = -1;
  return model;
}

double measured_memory_scale(const ModelProfile& profile, size_t first, size_t end,
                             int64_t measured_bytes, int64_t stash_versions) {
  const int64_t inputs = first == 0 ? profile.input_bytes : profile.boundary_bytes[first - 1];
  int64_t modelled = 0;  // the units' terms as if unscaled
  for (size_t i = first; i < end; ++i) {
    Unit unscaled = profile.units[i];
    unscaled.memory_scale = 1.0;
    modelled += unit_memory_bytes(unscaled, stash_versions);
  }
  // A stage of nothing but inputs cannot be scaled; the floor keeps a scale meaningful when the
  // probe saw less than its own inputs (the model never counts a stage below a tenth).
  if (modelled <= 0) return 0;
  return std::max(static_cast<double>(measured_bytes - inputs) / static_cast<double>(modelled),
                  0.1);
}

}  // namespace detail

double memory_margin() { return detail::kHeadroom; }

void calibrate_stage_memory(ModelProfile* profile, size_t first, size_t end, int64_t measured_bytes,
                            const PlanningOptions& options, size_t stages) {
  if (first >= end || end > profile->units.size()) {
    throw std::invalid_argument("calibrate_stage_memory: bad unit range [" + std::to_string(first) +
                                ", " + std::to_string(end) + ")");
  }
  const double scale = detail::measured_memory_scale(*profile, first, end, measured_bytes,
                                                     stashed_versions(options, stages));
  if (!(scale > 0)) return;
  for (size_t i = first; i < end; ++i) profile->units[i].memory_scale = scale;
}

StageCost stage_cost(const ModelProfile& profile, size_t first, size_t end,
                     const config::NodeConfig& node, double reference_gflops,
                     const PlanningOptions& options, size_t stages) {
  const size_t n = profile.units.size();
  if (first >= end || end > n || profile.boundary_bytes.size() + 1 != n) {
    throw std::invalid_argument("stage_cost: bad unit range [" + std::to_string(first) + ", " +
                                std::to_string(end) + ") of " + std::to_string(n) + " units");
  }
  StageCost cost;
  double forward = 0;
  for (size_t i = first; i < end; ++i) {
    forward += profile.units[i].forward_seconds;
    cost.parameter_bytes += profile.units[i].parameter_bytes;
  }
  cost.compute_seconds = detail::kComputeFactor * forward *
                         detail::speed_factor(node, reference_gflops);
  int64_t trainable = 0;
  for (size_t i = first; i < end; ++i) trainable += profile.units[i].trainable_bytes;
  const int64_t versions = stashed_versions(options, stages);
  const int64_t stash = versions * trainable;
  cost.stash_bytes = static_cast<double>(stash) * detail::kHeadroom;
  cost.memory_bytes =
      static_cast<double>(detail::raw_stage_bytes(profile, first, end, versions) +
                          std::max<int64_t>(options.stage_baseline_bytes, 0)) *
      detail::kHeadroom;
  const int64_t sent_forward = end < n ? profile.boundary_bytes[end - 1] : 0;
  const int64_t sent_back = first > 0 ? profile.boundary_bytes[first - 1] : 0;
  const double bytes = static_cast<double>(sent_forward) * codec_bytes_factor(options.activations) +
                       static_cast<double>(sent_back) * codec_bytes_factor(options.gradients);
  const double rate = node.bandwidth_bytes_per_second();
  cost.transfer_seconds = bytes == 0 ? 0.0 : (rate > 0 ? bytes / rate : detail::kInfinity);
  cost.step_seconds = cost.compute_seconds + cost.transfer_seconds;
  cost.forward_bytes_per_sample = static_cast<double>(sent_forward) *
                                  codec_bytes_factor(options.activations) /
                                  static_cast<double>(std::max<int64_t>(profile.batch_size, 1));
  return cost;
}

}  // namespace ravnest::planner
