// The memory probe as a process of its own: clusterize's graph::MemoryProbe starts this same
// executable as `ravnest probe-memory ...` for each stage (a fresh process, as a daemon is, so
// that one stage's peak is not another's), and the child runs training::probe_stage_memory and
// writes what it measured to a JSON file. docs/planner.md#memory.
#pragma once

#include <string>

#include "libs/graph/stage_memory.h"

namespace ravnest::cli {

// The MemoryProbe clusterize calls: starts /proc/self/exe probe-memory, with its files beside the
// probe's inputs file, and waits up to `timeout_seconds`. Throws std::runtime_error naming the stage, with the child's last
// line, when it fails or runs out of time (then it is killed).
graph::MemoryProbe process_memory_probe(int timeout_seconds = 900);

// `ravnest probe-memory`: the child's side. Returns the exit code (0, or 1 after writing one
// line to stderr).
struct ProbeMemoryArgs {
  std::string stage, inputs, scratch, result;
  int in_flight = 1;
  int64_t stash_versions = 0;
  bool root = false, leaf = false, ring = false;
  std::string device = "cpu";  // training::compute_device's names
};
int run_probe_memory(const ProbeMemoryArgs& args);

}  // namespace ravnest::cli
