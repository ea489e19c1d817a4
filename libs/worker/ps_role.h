// PsRole: what a parameter server and an evaluator share as JobWorkers: their status, failing
// (once, with a failed event), finishing (once, with a finished event) and running a reaction
// so that an exception fails the node instead of escaping into the event loop.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "libs/worker/job_worker.h"

namespace ravnest::worker {

class PsRole : public JobWorker {
 public:
  PsRole(WorkerSetup setup, WorkerPort& port) : setup_(std::move(setup)), port_(port) {}

  void fail(const std::string& why) override;
  WorkerStatus status() const override;

 protected:
  bool over() const { return over_; }  // finished or failed
  bool failed() const { return failed_; }
  void finish(uint64_t updates);
  void guarded(const std::function<void()>& body);
  void set_status(const std::function<void(WorkerStatus&)>& change);

  WorkerSetup setup_;
  WorkerPort& port_;

 private:
  bool over_ = false;
  bool failed_ = false;
  mutable std::mutex mutex_;
  WorkerStatus status_;
};

}  // namespace ravnest::worker
