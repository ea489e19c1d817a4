#include "libs/config/job_plan_check.h"

#include "libs/config/config_error.h"
#include "libs/config/printable.h"

namespace ravnest::config {

void check_job_for_plan(const JobSpec& job, const std::vector<NodeMetadata>& nodes,
                        const std::string& origin) {
  if (job.train.schedule != PipelineSchedule::kAsync) return;
  for (const auto& node : nodes) {
    if (node.shared_parameters.empty()) continue;
    const auto& [name, holders] = *node.shared_parameters.begin();
    std::string held_by;
    for (size_t i = 0; i < holders.size(); ++i) {
      held_by += (i == 0 ? "" : i + 1 == holders.size() ? " and " : ", ") +
                 std::string("node_") + std::to_string(holders[i]);
    }
    throw ConfigError(origin + ": train.schedule: \"async\" cannot train " + printable(name, 100) +
                      ", which " + held_by +
                      " hold (tied or reused weights): use \"gpipe\" or \"1f1b\", or plan other "
                      "cuts");
  }
}

}  // namespace ravnest::config
