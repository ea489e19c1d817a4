// JobWorker: what a node runs for a job, as JobControl (job_control.h) drives it: a pipeline
// stage (StageWorker), a stage of a prediction (StagePredictor), a parameter server
// (ParameterServer), an embedding server (EmbeddingServer) or an evaluator (PsEvaluator), each
// on WorkerBase (worker_base.h), which writes their lifecycle once. All calls but status()
// happen on the node's compute thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libs/worker/transfer.h"
#include "libs/worker/worker_setup.h"

namespace ravnest::worker {

class JobWorker {
 public:
  virtual ~JobWorker() = default;
  virtual void start() = 0;
  virtual void receive(TransferMessage message) = 0;
  virtual void fail(const std::string& why) = 0;  // a peer or the node itself failed
  // The job is being stopped: a worker that keeps checkpoints writes what it can.
  virtual void checkpoint_on_stop() {}
  // A stop agreed by every node (docs/faults.md#stopping): a worker that feeds data lets none in
  // beyond the update boundary `target` (0: the nearest it can reach; never one it has passed)
  // and returns the boundary it holds at; others return nothing. Any thread.
  virtual std::optional<uint64_t> hold(uint64_t /*target*/) { return std::nullopt; }
  virtual WorkerStatus status() const = 0;  // any thread
};

}  // namespace ravnest::worker
