// WeightStash: the versions of a stage's parameters that its forwards in flight ran on, for the
// asynchronous schedule (docs/async.md; PipeDream's weight stashing, as Ravnest does it).
//
// Under async a stage may step its optimizer between a micro-batch's forward and its backward.
// The backward must then differentiate the forward as it ran: on the weights of its version. So
// every forward records the current version (hold), the optimizer's step is bracketed by
// before_update (which keeps a copy of the current parameters if a forward in flight still refers
// to them) and after_update (a new version), and a backward on an older version recomputes its
// forward inside with_version(v), on a shadow of the stage (a deep copy, made once) holding the
// kept parameters; the shadow's gradients are added to the stage's .grad and so go to the current
// weights at the next step. The stage's own tensors are never swapped (set_data would trip
// autograd's version counters on BatchNorm's graphs) and its buffers (running statistics) are
// not touched by a recomputation, which must not count twice.
//
// Only versions still held are kept: memory is at most one copy of the stage's parameters per
// version in flight (max_in_flight - 1 at most).
//
// Not thread-safe; lives on the worker's compute thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/stage/stage.h"

namespace ravnest::worker {

class WeightStash {
 public:
  explicit WeightStash(std::shared_ptr<stage::Stage> stage);

  uint64_t version() const { return version_; }
  // A forward ran on `version` (the current one); its backward releases it.
  void hold(uint64_t version);
  void release(uint64_t version);
  // The parameters are about to change in place (an optimizer step, an average over a ring).
  void before_update();
  void after_update() { ++version_; }

  // Runs `body` on a module with the parameters of `version`: the stage itself for the current
  // version, else the shadow, whose gradients are then added to the stage's parameters' .grad
  // (and cleared). Throws std::logic_error for a version neither current nor kept.
  void with_version(uint64_t version, const std::function<void(stage::Stage&)>& body);

  size_t versions_kept() const { return kept_.size(); }
  // Sum of every parameter's values of `module` (default: the stage): tells two versions apart
  // (tests).
  double checksum() const { return checksum(*stage_); }
  static double checksum(const stage::Stage& module);

 private:
  std::shared_ptr<stage::Stage> stage_;
  std::shared_ptr<stage::Stage> shadow_;  // made at the first version not current
  std::vector<at::Tensor> parameters_;  // the stage's own tensors, in order
  std::vector<at::Tensor> shadow_parameters_;
  uint64_t version_ = 0;
  std::map<uint64_t, int> holds_;
  std::map<uint64_t, std::vector<at::Tensor>> kept_;
};

}  // namespace ravnest::worker
