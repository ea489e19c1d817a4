// Stage memory as clusterize asks for it: what one probe of a stage needs (StageProbe) and what
// it measured (StageMemory), and the file that carries a stage's micro-batch inputs to the probe
// process. The probe itself trains the stage (libs/training/memory_probe.h) in a process of its
// own, which the application starts (`ravnest probe-memory`): libs/graph only asks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

namespace ravnest::graph {

struct StageProbe {
  std::string stage_path;
  std::string inputs_path;     // save_probe_inputs' file
  bool root = false;
  bool leaf = false;
  int in_flight = 1;           // micro-batches whose forwards a daemon keeps at once
  int64_t stash_versions = 0;  // async: older parameter versions a daemon keeps
  bool ring = false;           // averaged with other clusters: a ring's flat copy of the state
  std::string device = "cpu";  // where the stage trains: "cpu", "cuda", "cuda:N"
};

struct StageMemory {
  int64_t baseline_bytes = 0;  // the idle process, before the stage
  int64_t peak_bytes = 0;      // its resident peak training the stage
  std::string peak_phase;      // "train", "checkpoint", ...: where the peak was
  std::vector<std::pair<std::string, int64_t>> phases;  // each phase's resident peak, in order
  // Probed on a GPU: the card's memory before the stage (the CUDA context) and at its peak
  // (that plus the caching allocator's reserved peak), with each phase's; 0 and empty on the CPU.
  int64_t device_baseline_bytes = 0;
  int64_t device_peak_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> device_phases;
  // The host's own peak and baseline when peak_bytes and baseline_bytes were made to count the
  // card too (clusterize on a GPU); else 0: they are the host's.
  int64_t host_peak_bytes = 0;
  int64_t host_baseline_bytes = 0;
  int64_t stage_bytes() const { return peak_bytes > baseline_bytes ? peak_bytes - baseline_bytes : 0; }
};

// Blocks while the stage trains in another process; throws std::runtime_error naming the stage.
using MemoryProbe = std::function<StageMemory(const StageProbe&)>;

// Each micro-batch's inputs to one stage, as one file (a pickled list of lists), and back.
// load throws std::runtime_error naming the file when it is not such a file.
void save_probe_inputs(const std::string& path,
                       const std::vector<std::vector<c10::IValue>>& micro_batches);
std::vector<std::vector<c10::IValue>> load_probe_inputs(const std::string& path);

}  // namespace ravnest::graph
