// PlanningOptions: how the plan will be trained, as far as the cost model cares
// (`clusterize --schedule ... --compression ...`, docs/planner.md#schedule-and-codec):
//  - the codec of activations and gradients scales the bytes each stage sends;
//  - a synchronous schedule (gpipe, 1f1b) leaves a bubble: a batch of M micro-batches through S
//    stages takes about (M + S - 1) / M of the slowest stage's step;
//  - the asynchronous schedule has no bubble, but each stage stashes up to max_in_flight - 1 older
//    versions of its parameters (max_in_flight 0: as many as the cluster has stages).
// Without a schedule the plan is as it always was: no bubble, no stash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "libs/config/job/compression_spec.h"
#include "libs/config/job/job_spec.h"

namespace ravnest::planner {

struct PlanningOptions {
  std::optional<config::PipelineSchedule> schedule;
  int micro_batches = 1;
  int max_in_flight = 0;
  config::WireCodec activations = config::WireCodec::kNone;
  config::WireCodec gradients = config::WireCodec::kNone;
  // What a daemon holds with no stage at all (measured by clusterize's probe): every stage's
  // memory includes it once (docs/planner.md#memory).
  int64_t stage_baseline_bytes = 0;
  // A layout the user asked for (`clusterize --stages K --clusters C`, or a [plan] block): every
  // cluster `stages` stages, `clusters` clusters; 0 leaves it to the planner, which still
  // chooses the nodes and the cuts (docs/planner.md#layout-on-request).
  int stages = 0;
  int clusters = 0;
};

// Bytes on the wire per byte of float32: 1, 0.5 (fp16, bf16), (1 + 4/256) / 4 (int8: a byte a
// value and a float32 scale per block of 256).
double codec_bytes_factor(config::WireCodec codec);

// A cluster of `stages` stages takes bubble_factor x its slowest step per batch.
double bubble_factor(const PlanningOptions& options, size_t stages);

// Older parameter versions a stage of a cluster of `stages` stages keeps.
int64_t stashed_versions(const PlanningOptions& options, size_t stages);

}  // namespace ravnest::planner
