#include "libs/worker/ps_role.h"

#include <exception>

namespace ravnest::worker {

void PsRole::fail(const std::string& why) {
  if (over_) return;
  over_ = true;
  failed_ = true;
  set_status([&](WorkerStatus& s) {
    s.state = WorkerStatus::State::kFailed;
    s.error = why;
  });
  ProgressEventData event;
  event.kind = EventKind::kFailed;
  event.message = setup_.node.name + ": " + why;
  port_.event(event);
}

WorkerStatus PsRole::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void PsRole::finish(uint64_t updates) {
  if (over_) return;
  over_ = true;
  set_status([&](WorkerStatus& s) { s.state = WorkerStatus::State::kFinished; });
  ProgressEventData event;
  event.kind = EventKind::kFinished;
  event.step = updates;
  port_.event(event);
}

void PsRole::guarded(const std::function<void()>& body) {
  if (over_) return;
  try {
    body();
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void PsRole::set_status(const std::function<void(WorkerStatus&)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  change(status_);
}

}  // namespace ravnest::worker
