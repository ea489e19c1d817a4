// Job setup: from a job file and a node's stored stage to everything its worker needs: the
// stage module, optimizer and LR schedule for every node, the data for the root, the loss for
// the leaf; in a parameter-server plan, the shard's optimizer for a server and the validation
// data and loss for the evaluator. The job's paths are read as given: a daemon first points them
// at the files `ravnest train` shipped (NodeStore::locate_shipped).
#pragma once

#include <memory>

#include "libs/config/job/job_spec.h"
#include "libs/store/node_store.h"
#include "libs/worker/pipeline/stage_worker.h"

namespace ravnest::worker {

// Throws std::runtime_error naming the job field or the file on anything wrong.
// A pipeline stage computes on `device` (compute_device.h); parameter servers and evaluators on
// the CPU.
std::unique_ptr<WorkerSetup> make_worker_setup(const store::NodeStore& store, const config::JobSpec& job,
                                               uint64_t job_id,
                                               c10::Device device = c10::Device(c10::kCPU));

// The worker the node's role calls for: a StageWorker (pipeline stages, parameter-server
// workers), a ParameterServer or a PsEvaluator.
std::shared_ptr<JobWorker> make_job_worker(WorkerSetup setup, WorkerPort& port);

}  // namespace ravnest::worker
