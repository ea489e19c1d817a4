// What a job asks that the plan it runs on cannot give, found by the requester before anything
// is shipped: a ConfigError naming the job file and the field, one line.
#pragma once

#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

// `origin`: the job file, as errors name it. Refused:
//   - schedule = "async" with a tensor that several stages hold (tied or reused weights): the
//     holders would step on different versions of it (docs/async.md);
//   - [ps] on a pipeline plan; on a parameter-server plan, backup = K above the workers, and an
//     evaluator without validation data (docs/parameter-server.md).
void check_job_for_plan(const JobSpec& job, const std::vector<NodeMetadata>& nodes,
                        const std::string& origin);

}  // namespace ravnest::config
