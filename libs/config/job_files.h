// Which of a job's files a node needs: what the requester ships to it and the daemon then opens.
#pragma once

#include <string>
#include <vector>

#include "libs/config/job_spec.h"
#include "libs/config/node_metadata.h"

namespace ravnest::config {

// The files of the job that the node of `metadata` needs, as paths on the requester's side:
// the training and validation data for the root, a script loss for the leaf.
std::vector<std::string> job_files_for(const JobSpec& job, const NodeMetadata& metadata);

}  // namespace ravnest::config
