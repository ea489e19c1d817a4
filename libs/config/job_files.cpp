#include "libs/config/job_files.h"

namespace ravnest::config {

std::vector<std::string> job_files_for(const JobSpec& job, const NodeMetadata& metadata) {
  std::vector<std::string> files;
  if (metadata.position == 0) {
    files.push_back(job.data.train.resolved);
    if (!job.data.validation.empty()) files.push_back(job.data.validation.resolved);
  }
  if (metadata.returns_model_output && job.loss.name == LossName::kScript) {
    files.push_back(job.loss.path.resolved);
  }
  return files;
}

}  // namespace ravnest::config
