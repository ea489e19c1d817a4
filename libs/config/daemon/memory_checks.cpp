#include "libs/config/daemon/memory_checks.h"

#include <algorithm>
#include <limits>

#include "libs/base/byte_size.h"

namespace ravnest::config {

namespace {

uint64_t non_negative(int64_t bytes) { return bytes > 0 ? static_cast<uint64_t>(bytes) : 0; }

}  // namespace

int64_t StageMemoryNeed::total() const {
  int64_t sum = 0;
  if (__builtin_add_overflow(stage_bytes, baseline_bytes, &sum)) {
    return std::numeric_limits<int64_t>::max();
  }
  return sum;
}

StageMemoryNeed stage_memory_need(const StageEstimates& estimates, int64_t own_baseline_bytes) {
  if (estimates.peak_memory_bytes <= 0) return {};
  StageMemoryNeed need;
  // node_metadata.cpp refuses a baseline above the peak; a negative difference is none.
  need.stage_bytes = std::max<int64_t>(0, estimates.peak_memory_bytes -
                                              std::max<int64_t>(0, estimates.daemon_baseline_bytes));
  need.baseline_bytes = std::max<int64_t>(0, own_baseline_bytes);
  return need;
}

std::optional<std::string> stage_memory_refusal(const StageEstimates& estimates,
                                                int64_t own_baseline_bytes,
                                                const MemoryBudget& budget) {
  const StageMemoryNeed need = stage_memory_need(estimates, own_baseline_bytes);
  if (estimates.peak_memory_bytes <= 0 || budget.bytes <= 0 || need.total() <= budget.bytes) {
    return std::nullopt;
  }
  return "the stage needs " + base::format_bytes(non_negative(need.total())) + " at its peak (" +
         base::format_bytes(non_negative(need.stage_bytes)) + " measured for the stage by clusterize, " +
         base::format_bytes(non_negative(need.baseline_bytes)) +
         " this daemon's own), more than this daemon's memory budget of " +
         base::format_bytes(non_negative(budget.bytes)) + " (" + budget.source + "); not stored";
}

std::optional<std::string> stage_device_memory_refusal(const StageEstimates& estimates,
                                                       const std::string& device,
                                                       int64_t device_bytes) {
  if (estimates.device_peak_memory_bytes <= 0 || device_bytes <= 0 ||
      estimates.device_peak_memory_bytes <= device_bytes) {
    return std::nullopt;
  }
  return "the stage needs " + base::format_bytes(estimates.device_peak_memory_bytes) + " of " + device +
         " at its peak (measured by clusterize, the CUDA context included), more than its " +
         base::format_bytes(device_bytes) + "; not stored";
}

MemoryAlarmStep step_memory_alarm(int64_t used_bytes, int64_t budget_bytes, bool armed) {
  if (budget_bytes <= 0) return {false, armed};
  // In 128 bits: used * 100 of an exabyte-sized budget does not fit 64.
  const __int128 used = static_cast<__int128>(std::max<int64_t>(0, used_bytes)) * 100;
  const __int128 budget = budget_bytes;
  if (armed && used >= budget * kWarnPercent) return {true, false};
  if (!armed && used < budget * kRearmPercent) return {false, true};
  return {false, armed};
}

std::string memory_warning_message(const std::string& node, int64_t used_bytes,
                                   const MemoryBudget& budget) {
  const __int128 percent =
      budget.bytes > 0 ? static_cast<__int128>(std::max<int64_t>(0, used_bytes)) * 100 / budget.bytes
                       : 0;
  return node + ": memory at " + std::to_string(static_cast<long long>(percent)) +
         " % of its budget (" + base::format_bytes(non_negative(used_bytes)) + " of " +
         base::format_bytes(non_negative(budget.bytes)) + ", " + budget.source + ")";
}

}  // namespace ravnest::config
