// WorkerBase: the lifecycle every JobWorker shares (StageWorker, StagePredictor,
// ParameterServer, EmbeddingServer, PsEvaluator), written once: its status, read under a mutex
// from any thread; failing once, with a failed event naming the node; finishing once, with a
// finished event; and running a reaction so that an exception fails the node instead of
// escaping into the event loop.
//
// Two roles go on after they finished: a pipeline stage forwards the final validation round, a
// predictor answers what is still in flight (AfterFinish::kGoOn: guarded() runs and fail()
// counts until the worker failed). The parameter-server roles are done once finished
// (AfterFinish::kStop: both are ignored then).
//
// Compute thread only, but for status().
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "libs/worker/job_worker.h"

namespace ravnest::worker {

class WorkerBase : public JobWorker {
 public:
  enum class AfterFinish { kStop, kGoOn };

  WorkerBase(WorkerSetup setup, WorkerPort& port, AfterFinish after_finish = AfterFinish::kStop)
      : setup_(std::move(setup)), port_(port), after_finish_(after_finish) {}

  // Once: on_failure(), then the failed status and event ("node_3: why").
  void fail(const std::string& why) final;
  WorkerStatus status() const final;

 protected:
  bool failed() const { return failed_; }
  bool finished() const { return finished_; }
  bool over() const { return failed_ || finished_; }
  // Once (nothing after a failure): the finished status and `event` as a finished event.
  void report_finished(ProgressEventData event);
  void finish(uint64_t updates);  // report_finished with `step` = updates
  // Runs `body` unless the worker is done (see AfterFinish); an exception fails it, saying
  // failure_message(e).
  void guarded(const std::function<void()>& body);
  void set_status(const std::function<void(WorkerStatus&)>& change);
  // Throws std::runtime_error naming the sender when `message` belongs to another job than
  // this worker's (a peer still running an earlier one).
  void check_job(const TransferMessage& message) const;

  // The role drops what it holds in flight: called once, by fail(), before the event.
  virtual void on_failure() {}
  // What a failed reaction reports. Default: the exception's what().
  virtual std::string failure_message(const std::exception& e) const { return e.what(); }

  WorkerSetup setup_;
  WorkerPort& port_;

 private:
  bool done() const { return after_finish_ == AfterFinish::kGoOn ? failed_ : over(); }

  const AfterFinish after_finish_;
  bool failed_ = false;
  bool finished_ = false;
  mutable std::mutex mutex_;
  WorkerStatus status_;
};

}  // namespace ravnest::worker
