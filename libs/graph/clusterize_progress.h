// ClusterizeProgress: what graph::clusterize says about its own progress while it works, as plain
// data, so that the library stays free of terminal code (apps/ravnest/clusterize_progress_view.h
// draws it: a live line on a terminal, a line a phase otherwise).
//
// Phases, in order: "load", "profile", "memory probes" (only with a memory probe; inside the plan
// phase), "plan", "cut", "save", "verify" (only with --verify). Each phase is reported once when
// it starts (done 0), then as it advances where it can count its work, then once when it ends
// (finished). The callback runs on clusterize's own thread, between its steps: it must be quick
// and must not throw (what it throws ends clusterize as any error would).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ravnest::graph {

struct ClusterizeProgress {
  std::string phase;
  uint64_t done = 0;      // work items finished in this phase (nodes, probes, comparisons)
  uint64_t total = 0;     // 0: not known beforehand
  bool finished = false;  // the phase's last report
};

using ClusterizeProgressFn = std::function<void(const ClusterizeProgress&)>;

}  // namespace ravnest::graph
