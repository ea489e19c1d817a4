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
#pragma once

#include <cstdint>

#include "libs/config/job_spec.h"

namespace ravnest::runtime {

class RootSchedule {
 public:
  RootSchedule(config::PipelineSchedule kind, int stages)
      : kind_(kind), stages_(stages < 1 ? 1 : stages) {}

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

}  // namespace ravnest::runtime
