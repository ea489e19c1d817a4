// Job setup: from a job file and a node's stored stage to everything its StageWorker needs:
// the stage module, optimizer and LR schedule for every node, the data for the root, the loss
// for the leaf. The job's paths are read as given: a daemon first points them at the files
// `ravnest train` shipped (NodeStore::locate_shipped).
#pragma once

#include <memory>

#include "libs/config/job_spec.h"
#include "libs/daemon/node_store.h"
#include "libs/daemon/stage_worker.h"

namespace ravnest::runtime {

// Throws std::runtime_error naming the job field or the file on anything wrong.
std::unique_ptr<WorkerSetup> make_worker_setup(const NodeStore& store, const config::JobSpec& job,
                                               uint64_t job_id);

}  // namespace ravnest::runtime
