// JobControl's agreed stop (docs/faults.md#stopping): stop_agreed_on_shutdown and its
// requester's part, ask_requester_to_stop, kept apart from the job's lifecycle. Runs on the RPC
// thread (run_daemon, on SIGTERM or SIGINT, before abandon_job) and blocks it, waiting on
// `wait_scope`, at most `timeout_seconds`; it throws nothing (a failed agreement is logged in one
// line and the job then stops as after a failure). Contract in job_control.h.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "libs/base/clock.h"
#include "libs/daemon/job/job_control.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/node_report_codec.h"

namespace ravnest::daemon {

using wire::NodeState;

void JobControl::stop_agreed_on_shutdown(kj::WaitScope& wait_scope, kj::Timer& timer,
                                         double timeout_seconds, const std::string& signal) {
  uint64_t job_id = 0;
  std::shared_ptr<worker::JobWorker> worker;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    worker = inbox_.current();
    if (effective_state(nullptr) != NodeState::kTraining || !worker) return;
    job_id = job_id_;
  }
  // A parameter server applies each worker's gradients as they come: no update count is shared
  // by every node, so there is no boundary to agree on (the requester's own stop has none either).
  if (metadata_.pipeline.empty() || !metadata_.parameter_server.servers.empty()) return;
  if (metadata_.cluster_count != 1) {
    ask_requester_to_stop(job_id, worker, wait_scope, timer, timeout_seconds, signal);
    return;
  }
  const double deadline = base::now_seconds() + timeout_seconds;
  // Waits for a call's answer, at most until the deadline.
  auto answer = [&](auto promise) {
    using Result = decltype(promise.wait(wait_scope));
    const double left = std::max(0.1, deadline - base::now_seconds());
    return promise
        .exclusiveJoin(timer.afterDelay(static_cast<uint64_t>(left * 1000) * kj::MILLISECONDS)
                           .then([]() -> Result {
                             kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer in time"));
                           }))
        .wait(wait_scope);
  };
  const int root = metadata_.pipeline.front();
  try {
    uint64_t boundary = 0;
    if (root == metadata_.node_id) {
      const auto held = worker->hold(0);
      if (!held) return;
      boundary = *held;
    } else {
      auto request = links_.node(metadata_.addresses.at(root)).holdRequest();
      request.setJobId(job_id);
      request.setTarget(0);
      auto response = answer(request.send());
      if (!response.getHolds()) return;
      boundary = response.getUpdates();
    }
    spdlog::info("{}: job {} stops after update {} on every node of the cluster", signal, job_id,
                 boundary);
    while (true) {
      bool reached = true;
      for (const auto& [id, address] : metadata_.addresses) {
        uint64_t updates = 0;
        bool training = false;
        if (id == metadata_.node_id) {
          updates = worker->status().updates;
          training = running(job_id);
        } else {
          auto response = answer(links_.node(address).statusRequest().send());
          const auto s = wire::decode_status(response.getStatus());
          updates = s.updates;
          training = s.job_id == job_id && s.state == NodeState::kTraining;
        }
        if (training && updates < boundary) reached = false;
      }
      if (reached) break;
      if (base::now_seconds() > deadline) {
        spdlog::warn("{}: the cluster did not reach update {} in time", signal, boundary);
        return;
      }
      timer.afterDelay(20 * kj::MILLISECONDS).wait(wait_scope);
    }
    const std::string reason = store_.node_name() + " was stopped (" + signal + "); every node of its " +
                               "cluster stopped after update " + std::to_string(boundary);
    for (const auto& [id, address] : metadata_.addresses) {
      if (id == metadata_.node_id) continue;
      auto request = links_.node(address).stopRequest();
      request.setJobId(job_id);
      request.setReason(reason);
      answer(request.send().ignoreResult());
    }
  } catch (const kj::Exception& e) {
    spdlog::warn("{}: the agreed stop did not complete: {}", signal, wire::kj_reason(e));
  } catch (const std::exception& e) {
    spdlog::warn("{}: the agreed stop did not complete: {}", signal, e.what());
  }
}

void JobControl::ask_requester_to_stop(uint64_t job_id,
                                       const std::shared_ptr<worker::JobWorker>& worker,
                                       kj::WaitScope& wait_scope, kj::Timer& timer,
                                       double timeout_seconds, const std::string& signal) {
  const double deadline = base::now_seconds() + timeout_seconds;
  const std::string fallback = "it stops as after a failure, and `ravnest resume` continues from "
                               "the newest checkpoint every node holds";
  if (!events_.has_listeners()) {
    spdlog::warn("{}: no requester follows job {}, whose other clusters' roots this node "
                 "does not know: {}", signal, job_id, fallback);
    return;
  }
  wire::ProgressEventData event;
  event.kind = wire::EventKind::kStopping;
  event.step = worker->status().updates;
  event.message = store_.node_name() + " was stopped (" + signal + ")";
  // Listeners of requesters that went away (or follow no longer) fail or stay silent: only an
  // answer counts as somebody who may stop the job.
  const size_t answered = events_.publish_and_wait(event, metadata_, wait_scope, timer,
                                                   std::min(5.0, timeout_seconds));
  if (answered == 0) {
    spdlog::warn("{}: no requester following job {} answered: {}", signal, job_id, fallback);
    return;
  }
  spdlog::info("{}: job {} spans {} clusters: the requester following it was asked to stop "
               "it on every node after the same update", signal, job_id, metadata_.cluster_count);
  // The requester holds every root, waits for every node to reach the boundary, then stops the
  // job everywhere, this node included: the stop writes this node's checkpoint of that update.
  while (running(job_id)) {
    if (base::now_seconds() > deadline) {
      spdlog::warn("{}: the requester did not stop job {} within {} s: {}", signal, job_id,
                   timeout_seconds, fallback);
      return;
    }
    timer.afterDelay(20 * kj::MILLISECONDS).wait(wait_scope);
  }
  // The job is stopped here once the stop's work is done, a moment before its answer leaves.
  while (stops_answering_ > 0 && base::now_seconds() < deadline) {
    timer.afterDelay(20 * kj::MILLISECONDS).wait(wait_scope);
  }
}

}  // namespace ravnest::daemon
