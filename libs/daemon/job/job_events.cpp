#include "libs/daemon/job/job_events.h"

#include <cmath>
#include <memory>

#include <kj/vector.h>
#include <spdlog/spdlog.h>

#include "libs/wire/node_report_codec.h"

namespace ravnest::daemon {

kj::Promise<void> JobEvents::subscribe(SubscribeCall context) {
  listeners_.push_back(context.getParams().getListener());
  return kj::READY_NOW;
}

void JobEvents::record(store::LastJob::Outcome outcome, uint64_t job_id,
                       const std::string& error) {
  try {
    save_last_job(store_.last_job_path(), store::LastJob{job_id, outcome, error});
  } catch (const std::exception& e) {
    spdlog::error("cannot record the outcome of job {}: {}", job_id, e.what());
  }
}

void JobEvents::publish(const wire::ProgressEventData& event, const config::NodeMetadata& self,
                        uint64_t job_id) {
  // "node_3: reason": the log's lines name the node already.
  std::string why = event.message;
  if (why.rfind(self.name + ": ", 0) == 0) why.erase(0, self.name.size() + 2);
  switch (event.kind) {
    case wire::EventKind::kStep: spdlog::debug("step {} loss {:.6f}", event.step, event.loss); break;
    case wire::EventKind::kValidation:
      // No accuracy (regression): none printed, never "nan".
      if (std::isnan(event.accuracy)) {
        spdlog::info("validation after update {}: loss {:.6f}", event.step, event.loss);
      } else {
        spdlog::info("validation after update {}: loss {:.6f} accuracy {:.4f}", event.step,
                     event.loss, event.accuracy);
      }
      break;
    case wire::EventKind::kFinished: spdlog::info("job finished"); break;
    case wire::EventKind::kFailed: spdlog::error("job failed: {}", event.message); break;
    case wire::EventKind::kWarning: spdlog::warn("{}", why); break;
    case wire::EventKind::kStopping: spdlog::info("{}", why); break;
  }
  if (event.kind == wire::EventKind::kFinished || event.kind == wire::EventKind::kFailed) {
    record(event.kind == wire::EventKind::kFinished ? store::LastJob::Outcome::kFinished
                                                    : store::LastJob::Outcome::kFailed,
           job_id, why);
  }
  const wire::NodeEvent sent{self.node_id, self.cluster, event};
  for (auto& listener : listeners_) {
    auto request = listener.eventRequest();
    wire::encode_event(sent, request.initEvent());
    tasks_.add(request.send().ignoreResult().catch_([](kj::Exception&&) {
      // A requester that went away: the job goes on; `ravnest status` still reports.
    }));
  }
}

size_t JobEvents::publish_and_wait(const wire::ProgressEventData& event,
                                   const config::NodeMetadata& self, kj::WaitScope& wait_scope,
                                   kj::Timer& timer, double timeout_seconds) {
  spdlog::info("{}", event.message);
  const wire::NodeEvent sent{self.node_id, self.cluster, event};
  auto answered = std::make_shared<size_t>(0);
  kj::Vector<kj::Promise<void>> calls;
  for (auto& listener : listeners_) {
    auto request = listener.eventRequest();
    wire::encode_event(sent, request.initEvent());
    calls.add(request.send().ignoreResult().then([answered]() { ++*answered; },
                                                 [](kj::Exception&&) {}));
  }
  kj::joinPromises(calls.releaseAsArray())
      .exclusiveJoin(timer.afterDelay(static_cast<uint64_t>(timeout_seconds * 1000) *
                                      kj::MILLISECONDS))
      .wait(wait_scope);
  return *answered;
}

}  // namespace ravnest::daemon
