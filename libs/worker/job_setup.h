// Job setup: from a job file and a node's stored stage to everything its worker needs: the
// stage module, optimizer and LR schedule for every node, the data for the root, the loss for
// the leaf; in a parameter-server plan, the shard's optimizer for a server and the validation
// data and loss for the evaluator. The job's paths are read as given: a daemon first points them
// at the files `ravnest train` shipped (NodeStore::locate_shipped).
#pragma once

#include <memory>
#include <variant>

#include "libs/config/job/job_spec.h"
#include "libs/store/node_store.h"
#include "libs/worker/pipeline/stage_predictor.h"
#include "libs/worker/pipeline/stage_worker.h"
#include "libs/worker/ps/embedding_server.h"
#include "libs/worker/ps/ps_evaluator.h"
#include "libs/worker/ps/ps_server.h"

namespace ravnest::worker {

// What make_worker_setup makes of a job for one node: the part every role shares, and the
// options of the one role the node plays, whose alternative names the worker make_job_worker
// makes. Made whole before the job starts (the data loaded, the stage on its device), so that
// starting it is only constructing the worker.
struct JobSetup {
  using RoleOptions = std::variant<StageWorker::Options, StagePredictor::Options,
                                   ParameterServer::Options, EmbeddingServer::Options,
                                   PsEvaluator::Options>;
  WorkerSetup common;
  RoleOptions role;
};

// Throws std::runtime_error naming the job field or the file on anything wrong.
// A pipeline stage computes on `device` (compute_device.h); parameter servers and evaluators on
// the CPU.
std::unique_ptr<JobSetup> make_worker_setup(const store::NodeStore& store,
                                            const config::JobSpec& job, uint64_t job_id,
                                            c10::Device device = c10::Device(c10::kCPU));

// The worker the node's role calls for (JobSetup::role): a StageWorker (pipeline stages,
// parameter-server workers, hybrid trainers), a StagePredictor (a prediction job's stages), a
// ParameterServer, an EmbeddingServer (a hybrid plan's servers) or a PsEvaluator.
std::shared_ptr<JobWorker> make_job_worker(JobSetup setup, WorkerPort& port);

}  // namespace ravnest::worker
