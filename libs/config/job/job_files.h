// Which of a job's paths a node reads: what the requester ships to it and what the daemon then
// opens, by the job file's key, so that both sides agree on where each path went.
#pragma once

#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

// One path of the job that a node reads.
struct NodeJobPath {
  std::string field;  // the job file's key: "data.train", "data.order", "data.validation" or
                      // "loss.path"
  JobPath path;       // as the job gives it (resolved on the requester's side)
};

// The paths the node of `metadata` reads: the training data (and its order) and the validation data for the root, a
// script loss for the leaf; in a parameter-server plan the training data for a worker, the
// validation data (and a script loss) for the evaluator, nothing for a server.
std::vector<NodeJobPath> job_paths_for(const JobSpec& job, const NodeMetadata& metadata);

}  // namespace ravnest::config
