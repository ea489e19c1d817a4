#include "libs/planner/planning_options.h"

#include <algorithm>

namespace ravnest::planner {

double codec_bytes_factor(config::WireCodec codec) {
  switch (codec) {
    case config::WireCodec::kNone: return 1.0;
    case config::WireCodec::kFp16:
    case config::WireCodec::kBf16: return 0.5;
    case config::WireCodec::kInt8: return (1.0 + 4.0 / 256.0) / 4.0;
  }
  return 1.0;
}

double bubble_factor(const PlanningOptions& options, size_t stages) {
  if (!options.schedule || *options.schedule == config::PipelineSchedule::kAsync || stages < 2) {
    return 1.0;
  }
  const double m = std::max(options.micro_batches, 1);
  return (m + static_cast<double>(stages) - 1) / m;
}

int64_t stashed_versions(const PlanningOptions& options, size_t stages) {
  if (!options.schedule || *options.schedule != config::PipelineSchedule::kAsync) return 0;
  const int64_t in_flight =
      options.max_in_flight > 0 ? options.max_in_flight : static_cast<int64_t>(stages);
  return std::max<int64_t>(in_flight - 1, 0);
}

}  // namespace ravnest::planner
