// Pipeline schedules: the pure decisions of synchronous pipeline training, on plain numbers.
//
// Only the root decides when a micro-batch enters the pipeline; every other stage reacts to what
// arrives. To keep training exactly equal to one process running the same micro-batches, every
// stage runs forwards in micro-batch order and backwards in micro-batch order, and steps its
// optimizer right after its last backward of an update (nothing of the next batch can reach it
// before, because the root starts a batch only when the previous one came back whole).
//
//   GPipe: the root injects all micro-batches of a batch, then waits for their gradients.
//   1F1B:  the root keeps at most `stages` micro-batches in flight, injecting the next one each
//          time a gradient comes back, so a stage holds activations for at most that many.
//
// Async (Ravnest's, docs/async.md) is not exact: the root keeps up to `max_in_flight`
// micro-batches in flight across batch boundaries (no flush), each stage still steps after its
// own last backward of an update, and a backward whose forward ran on older weights recomputes
// that forward on them (weight_stash.h). Only validation drains the pipeline: the root injects
// nothing after a batch whose end validates until that validation is done.
#pragma once

#include <cstdint>

#include "libs/config/job/job_spec.h"

namespace ravnest::training {

class RootSchedule {
 public:
  // `max_in_flight` (async only): 0 means `stages`.
  RootSchedule(config::PipelineSchedule kind, int stages, int64_t max_in_flight = 0)
      : kind_(kind),
        stages_(stages < 1 ? 1 : stages),
        max_in_flight_(max_in_flight > 0 ? static_cast<uint64_t>(max_in_flight)
                                         : static_cast<uint64_t>(stages_)) {}

  bool asynchronous() const { return kind_ == config::PipelineSchedule::kAsync; }
  uint64_t max_in_flight() const { return max_in_flight_; }
  // Async: with `in_flight` micro-batches injected and not back, whatever batch they belong to,
  // may another be injected now?
  bool may_inject_async(uint64_t in_flight) const { return in_flight < max_in_flight_; }

  // With `injected` micro-batches of a batch of `count` already sent forward and `completed` of
  // them back (backward done at the root), may the next one be injected now?
  bool may_inject(int injected, int completed, int count) const {
    if (injected >= count) return false;
    if (kind_ == config::PipelineSchedule::kGPipe) return true;
    return injected - completed < stages_;
  }

 private:
  config::PipelineSchedule kind_;
  int stages_;
  uint64_t max_in_flight_;
};

// When a finished batch triggers an optimizer update: after every `update_frequency` batches,
// and after the last batch of training for a partial accumulation.
inline bool update_due(uint64_t batches_done, int update_frequency, bool last_batch) {
  return last_batch || (update_frequency <= 1) ||
         batches_done % static_cast<uint64_t>(update_frequency) == 0;
}

// Whether validation runs after this update: every `val_freq` updates, or (val_freq 0) at the
// end of every epoch.
inline bool validation_due(uint64_t updates_done, int val_freq, bool epoch_ended) {
  if (val_freq <= 0) return epoch_ended;
  return updates_done > 0 && updates_done % static_cast<uint64_t>(val_freq) == 0;
}

// Optimizer updates done once `batches_done` batches are, as update_due counts them.
inline uint64_t updates_after(uint64_t batches_done, int update_frequency, bool last_batch) {
  const uint64_t every = update_frequency <= 1 ? 1 : static_cast<uint64_t>(update_frequency);
  return batches_done / every + (last_batch && batches_done % every != 0 ? 1 : 0);
}

// Whether the end of training batch `step` (0-based, of `total`, `per_epoch` to an epoch) is
// followed by a validation round, as the root's batch_finished decides: after an update that
// validation_due names, at an epoch's end when val_freq is 0, and after the last batch. The
// async root stops injecting after such a batch, so that the round sees no work in flight.
inline bool validation_follows(uint64_t step, uint64_t total, uint64_t per_epoch,
                               int update_frequency, int val_freq) {
  const uint64_t done = step + 1;
  const bool last = done >= total;
  const bool updated = update_due(done, update_frequency, last);
  const bool epoch_ended = per_epoch > 0 && done % per_epoch == 0;
  return last || (val_freq <= 0 && epoch_ended) ||
         (updated && validation_due(updates_after(done, update_frequency, last), val_freq, false));
}

}  // namespace ravnest::training
