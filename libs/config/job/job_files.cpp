#include "libs/config/job/job_files.h"

namespace ravnest::config {

std::vector<NodeJobPath> job_paths_for(const JobSpec& job, const NodeMetadata& metadata) {
  std::vector<NodeJobPath> paths;
  // Parameter-server plans: a server needs no file; the evaluator scores on the validation data,
  // the workers train and leave validation to it (a hybrid plan's trainers validate).
  if (metadata.role == Role::kServer) return paths;
  const bool evaluator = metadata.role == Role::kEvaluator;
  const bool validates = metadata.role != Role::kWorker || metadata.parameter_server.hybrid();
  if (metadata.position == 0 && !evaluator) {
    paths.push_back({"data.train", job.data.train});
    if (!job.data.order.empty()) paths.push_back({"data.order", job.data.order});
  }
  if ((metadata.position == 0 && validates) || evaluator) {
    if (!job.data.validation.empty()) paths.push_back({"data.validation", job.data.validation});
  }
  if ((metadata.returns_model_output || evaluator) && job.loss.name == LossName::kScript) {
    paths.push_back({"loss.path", job.loss.path});
  }
  return paths;
}

}  // namespace ravnest::config
