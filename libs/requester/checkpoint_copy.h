// A checkpoint moved from one node to another through the requester (`ravnest replace` moves one
// through TemporaryCheckpoint too, replacement.cpp): a resume that repairs a
// node's damaged checkpoint from its keeper's copy (job_run.cpp), a cluster taken into a running
// job from its source cluster's (running_plan_change.cpp), and re-cut on the way when the source
// is cut at other points (training/checkpoint_recut.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

// A checkpoint passing through the requester: a temporary file of the plan directory (the
// requester may write there), ".checkpoint.<pid><suffix>.pt", removed whatever happens.
struct TemporaryCheckpoint {
  std::string path;
  TemporaryCheckpoint(const std::string& plan_dir, const std::string& suffix);
  TemporaryCheckpoint(const TemporaryCheckpoint&) = delete;
  TemporaryCheckpoint& operator=(const TemporaryCheckpoint&) = delete;
  TemporaryCheckpoint(TemporaryCheckpoint&& other) noexcept;
  ~TemporaryCheckpoint();
};

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

// The checkpoints of update `updates` of the job `identity` of every stage of cluster `from` of
// `plan`, re-cut to the stages of its cluster `to` (training::recut_checkpoints, which loads the
// stage files of the plan directory and `optimizer` as the nodes make it) and stored on cluster
// `to`'s nodes, each naming its slot. The source files go through temporary files of the plan
// directory (removed whatever happens); memory holds one target stage and the source checkpoints
// that hold its names at a time. Blocks for every transfer; throws what fetch_checkpoint,
// recut_checkpoints or store_checkpoint throws.
void copy_recut_checkpoints(Requester& requester, const Plan& plan, const std::string& identity,
                            uint64_t updates, int from, int to,
                            const config::OptimizerSpec& optimizer);

}  // namespace ravnest::requester
