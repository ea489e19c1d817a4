#include "libs/config/job_files.h"

namespace ravnest::config {

std::vector<NodeJobPath> job_paths_for(const JobSpec& job, const NodeMetadata& metadata) {
  std::vector<NodeJobPath> paths;
  if (metadata.position == 0) {
    paths.push_back({"data.train", job.data.train});
    if (!job.data.validation.empty()) paths.push_back({"data.validation", job.data.validation});
  }
  if (metadata.returns_model_output && job.loss.name == LossName::kScript) {
    paths.push_back({"loss.path", job.loss.path});
  }
  return paths;
}

}  // namespace ravnest::config
