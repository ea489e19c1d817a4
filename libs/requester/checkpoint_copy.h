// A checkpoint moved from one node to another through the requester: a resume that repairs a
// node's damaged checkpoint from its keeper's copy (job_run.cpp), a cluster taken into a running
// job from its source cluster's (running_plan_change.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "libs/config/plan/node_metadata.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

// A checkpoint's place: the node that holds it and the plan's slot it names.
struct CheckpointAt {
  config::NodeMetadata node;
  int cluster = 0;
  int position = 0;
};

// Copies the checkpoint of update `updates` of the job `identity` from `from` to `to`, through a
// temporary file of the plan directory `plan_dir` (streamed in, then out, never held whole in
// memory; removed whatever happens). `adapt`, when given, rewrites that file in between (e.g. the
// slot a copy names). Blocks for both transfers; throws what fetch_checkpoint, adapt or
// store_checkpoint throws (naming the node).
void copy_checkpoint(Requester& requester, const std::string& plan_dir,
                     const std::string& identity, uint64_t updates, const CheckpointAt& from,
                     const CheckpointAt& to,
                     const std::function<void(const std::string& path)>& adapt = {});

}  // namespace ravnest::requester
