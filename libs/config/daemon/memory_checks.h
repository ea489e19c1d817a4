// What a daemon decides against its memory budget (memory_budget.h; docs/daemon.md#memory): at
// push, whether a stage fits; while a job runs, when to warn. Pure decisions and their one-line
// messages, so that both are tested without a daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libs/config/daemon/memory_budget.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

// What a stage needs on this daemon at its peak: what clusterize measured for the stage alone
// (peak_memory_bytes - daemon_baseline_bytes: its daemon's idle part taken out) plus this
// daemon's own idle baseline. 0 when the metadata has no measured peak.
struct StageMemoryNeed {
  int64_t stage_bytes = 0;     // measured for the stage by clusterize
  int64_t baseline_bytes = 0;  // this daemon's own
  int64_t total() const;       // their sum, saturating
};
StageMemoryNeed stage_memory_need(const StageEstimates& estimates, int64_t own_baseline_bytes);

// The refusal when the stage's need exceeds the budget, one line without the node's name (the
// requester names it): "the stage needs 652 MB at its peak (489 MB measured for the stage by
// clusterize, 163 MB this daemon's own), more than this daemon's memory budget of 600 MB
// (cgroup memory.limit_in_bytes); not stored". nullopt when it fits, when the peak was not
// measured, or when no budget is known.
std::optional<std::string> stage_memory_refusal(const StageEstimates& estimates,
                                                int64_t own_baseline_bytes,
                                                const MemoryBudget& budget);

// The refusal of a daemon training on a GPU when the stage's measured peak on the card (the
// CUDA context included) exceeds the card's memory: "the stage needs 9.10 GB of cuda:0 at its
// peak (measured by clusterize, the CUDA context included), more than its 8.00 GB; not stored".
// nullopt when it fits, when it was not measured on a GPU (device_peak_memory_bytes 0), or when
// the card's size is unknown (0).
std::optional<std::string> stage_device_memory_refusal(const StageEstimates& estimates,
                                                       const std::string& device,
                                                       int64_t device_bytes);

// The warning while a job runs: given once when used bytes reach kWarnPercent of the budget, and
// again only after they fell below kRearmPercent (so that hovering at the line warns once).
constexpr int kWarnPercent = 90;
constexpr int kRearmPercent = 80;

struct MemoryAlarmStep {
  bool warn = false;  // emit the warning now
  bool armed = true;  // the state to pass to the next step
};
// `armed`: no warning given since the last re-arming (true at the start of a job).
MemoryAlarmStep step_memory_alarm(int64_t used_bytes, int64_t budget_bytes, bool armed);

// "node_2: memory at 93 % of its budget (558 MB of 600 MB, cgroup memory.limit_in_bytes)"; the
// percentage rounded down.
std::string memory_warning_message(const std::string& node, int64_t used_bytes,
                                   const MemoryBudget& budget);

}  // namespace ravnest::config
