#include "libs/worker/worker_base.h"

#include <stdexcept>
#include <string>

namespace ravnest::worker {

void WorkerBase::fail(const std::string& why) {
  if (done()) return;
  failed_ = true;
  on_failure();
  set_status([&](WorkerStatus& s) {
    s.state = WorkerStatus::State::kFailed;
    s.error = why;
  });
  ProgressEventData event;
  event.kind = EventKind::kFailed;
  event.message = setup_.node.name + ": " + why;
  port_.event(event);
}

WorkerStatus WorkerBase::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void WorkerBase::report_finished(ProgressEventData event) {
  if (over()) return;
  finished_ = true;
  set_status([&](WorkerStatus& s) { s.state = WorkerStatus::State::kFinished; });
  event.kind = EventKind::kFinished;
  port_.event(event);
}

void WorkerBase::finish(uint64_t updates) {
  ProgressEventData event;
  event.step = updates;
  report_finished(event);
}

void WorkerBase::guarded(const std::function<void()>& body) {
  if (done()) return;
  try {
    body();
  } catch (const std::exception& e) {
    fail(failure_message(e));
  }
}

void WorkerBase::set_status(const std::function<void(WorkerStatus&)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  change(status_);
}

void WorkerBase::check_job(const TransferMessage& message) const {
  if (message.batch.job_id != setup_.job_id) {
    throw std::runtime_error("transfer for job " + std::to_string(message.batch.job_id) +
                             " from node " + std::to_string(message.from_node) +
                             " while running job " + std::to_string(setup_.job_id));
  }
}

}  // namespace ravnest::worker
