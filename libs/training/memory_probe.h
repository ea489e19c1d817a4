// MemoryProbe: a stage trained as a daemon trains it, in this process, to measure the resident
// memory that costs (docs/planner.md#memory). `ravnest clusterize` runs it in a child process
// per stage (`ravnest probe-memory`), so that each measurement starts from a fresh process as a
// daemon does, and plans with what it measured instead of what a formula assumes.
//
// What it does, in the daemon's order and with the daemon's functions: load the stage from its
// file (torch_support::load_module), make the optimizer (make_optimizer), then `updates` times: take
// micro-batches in as received tensors (fresh leaves), keep at most `in_flight` forwards alive
// for their backwards (GPipe: all of a batch; 1F1B: up to the stages; async: max_in_flight),
// hold a copy of each output as the message that sends it, backward each with a received
// gradient (the leaf: from a loss that keeps a tensor the size of the output, as a
// cross-entropy does), copy each input's gradient as the message that sends it back, step the
// optimizer, clone the buffers as the update boundary does, keep `stash_versions` copies of the
// trainable parameters (async), keep the ring's flat copy of the parameters and buffers (a
// stage averaged with other clusters: RingAllReduce's buffer, kept between rounds, and two of
// its 4 MiB segments each way), and write a checkpoint (save_optimizer, save_checkpoint); then
// resume as a new job on the same daemon does: the stage loaded afresh, a new optimizer, the
// checkpoint read and restored, and one more update; and save the trained stage, as the job's
// end does.
//
// The resident peak of each phase is the kernel's (VmHWM, reset between phases where the kernel
// allows), so allocator slack, code pages touched and the checkpoint's copies are all in it.
// Blocks; throws std::runtime_error naming the stage file on any failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "libs/config/job/job_spec.h"

namespace ravnest::training {

struct MemoryProbeRequest {
  std::string stage_path;
  // Each micro-batch's inputs, in the order of the stage's forward arguments.
  std::vector<std::vector<c10::IValue>> micro_batches;
  bool root = false;  // its inputs are data: no gradient goes back
  bool leaf = false;
  int in_flight = 1;           // forwards kept for their backwards at once (>= 1)
  int64_t stash_versions = 0;  // async: older copies of the trainable parameters
  bool ring = false;  // averaged over a ring: RingAllReduce keeps a flat copy of what it reduces
  config::OptimizerSpec optimizer;  // the plan assumes Adam (two moments a parameter)
  int updates = 2;             // the second runs with the optimizer's state in place
  std::string scratch_dir;     // where the checkpoint is written (and removed)
  // Where the stage computes, as a daemon's `device`. On CUDA the stage, its inputs and every
  // tensor it makes live on the card (the ring's flat copy and what travels stay on the host,
  // as in a daemon) and each phase also reads the caching allocator's peak (device_memory.h).
  c10::Device device = c10::Device(c10::kCPU);
};

struct MemoryProbePhase {
  std::string name;         // "load", "train", "checkpoint", "resume", "finish"
  int64_t peak_bytes = 0;   // the process's resident peak during the phase
  int64_t device_peak_bytes = 0;  // CUDA: the allocator's reserved peak during the phase
};

struct MemoryProbeResult {
  int64_t baseline_bytes = 0;  // resident before the stage was loaded (the inputs included)
  int64_t inputs_bytes = 0;    // the micro-batches' tensors, held for the probe only
  int64_t peak_bytes = 0;      // the largest phase peak
  std::vector<MemoryProbePhase> phases;
  // CUDA: what the card held before the stage (the context, in the card's used memory) and at
  // most with it (that plus the allocator's largest reserved peak). 0 on the CPU.
  int64_t device_baseline_bytes = 0;
  int64_t device_peak_bytes = 0;
  // What training the stage costs above an idle process: peak - baseline.
  int64_t stage_bytes() const { return peak_bytes > baseline_bytes ? peak_bytes - baseline_bytes : 0; }
};

// Precondition: request.micro_batches non-empty, in_flight >= 1, scratch_dir exists.
MemoryProbeResult probe_stage_memory(const MemoryProbeRequest& request);

}  // namespace ravnest::training
