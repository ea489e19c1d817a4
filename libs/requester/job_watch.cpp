#include "libs/requester/job_watch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

#include "libs/base/clock.h"
#include "libs/requester/requester_impl.h"
#include "libs/wire/lost_connection.h"

namespace ravnest::requester {

using base::now_seconds;

std::string epoch_words(uint32_t epoch, uint32_t epochs) {
  std::string words = "epoch " + std::to_string(epoch + 1);
  if (epochs > 0) words += "/" + std::to_string(epochs);
  return words;
}

void report(const Watch& watch) {
  if (watch.active && watch.report) watch.report();
}

// ", accuracy X" for a validation line, nothing when the task has none (NaN): never "nan".
static std::string accuracy_words(double accuracy) {
  return std::isnan(accuracy) ? "" : ", accuracy " + std::to_string(accuracy);
}

// One event a daemon sent, folded into the watch.
void apply_event(Watch& watch, const wire::NodeEvent& sent, const Log& on_log) {
  const auto& e = sent.event;
  if (e.kind == wire::EventKind::kWarning) {
    // The node goes on (memory near its budget, say): said, never taken for a failure.
    if (on_log) on_log("warning: " + e.message);
    return;
  }
  if (e.kind == wire::EventKind::kStopping) {
    // Acted on by watch_until_done: the node waits for that stop before its daemon exits.
    if (watch.stopping.empty()) watch.stopping = e.message;
    return;
  }
  if (sent.cluster < 0) {
    // A parameter server's evaluator: its score is every worker's model's.
    if (e.kind == wire::EventKind::kValidation) {
      for (auto& [cluster, p] : watch.progress) {
        p.has_validation = true;
        p.validation_loss = e.loss;
        p.validation_accuracy = e.accuracy;
      }
      if (on_log) {
        const uint32_t epochs = watch.progress.empty() ? 0 : watch.progress.begin()->second.epochs;
        on_log("evaluator: the servers' weights after " + std::to_string(e.step) + " updates, " +
               epoch_words(e.epoch, epochs) + ": loss " + std::to_string(e.loss) +
               accuracy_words(e.accuracy));
      }
    } else if (e.kind == wire::EventKind::kFinished) {
      watch.finished.insert(sent.node_id);
    } else if (e.kind == wire::EventKind::kFailed && watch.failure.empty()) {
      watch.failure = e.message;
    }
    return;
  }
  if (watch.dropped.count(sent.cluster)) return;  // a dropped cluster's last words
  if (e.kind == wire::EventKind::kFailed && watch.drop_failed_clusters) return;  // polls decide
  auto& p = watch.progress[sent.cluster];
  switch (e.kind) {
    case wire::EventKind::kStep:
      p.loss = e.loss;
      p.epoch = e.epoch;
      break;
    case wire::EventKind::kValidation:
      p.has_validation = true;
      p.validation_loss = e.loss;
      p.validation_accuracy = e.accuracy;
      if (on_log) {
        on_log("cluster " + std::to_string(sent.cluster) + " validation: loss " +
               std::to_string(e.loss) + accuracy_words(e.accuracy) + " (" +
               epoch_words(e.epoch, p.epochs) + ")");
      }
      break;
    case wire::EventKind::kFinished:
      watch.finished.insert(sent.node_id);
      break;
    case wire::EventKind::kFailed:
      if (watch.failure.empty()) watch.failure = e.message;
      break;
    case wire::EventKind::kWarning:
    case wire::EventKind::kStopping:
      break;  // handled above
  }
}

// Gives every node a listener for its progress events.
void Requester::Impl::subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log,
                                const std::set<int>& skip, const NodeFailure& on_failure) {
  for (const auto& meta : plan_.nodes) {
    if (skip.count(meta.cluster)) continue;
    auto request = node(meta).subscribeRequest();
    request.setListener(kj::heap<ProgressListenerImpl>(
        [watch, on_log](const wire::NodeEvent& e) {
          if (!watch->active) return;
          if (watch->record) watch->record(e);
          apply_event(*watch, e, on_log);
          report(*watch);
        }));
    try {
      await(request.send().ignoreResult(), meta, "subscribe");
    } catch (const NodeCallError& e) {
      if (!taken(on_failure, meta, e)) throw;
    }
  }
}

// Events as they come, and every node's status twice a second, until every node finished. A
// node that does not answer for `unresponsive_seconds`, fails, was stopped or moved on to
// another job fails the job: TrainFailed (the caller then stops it everywhere).
void Requester::Impl::watch_until_done(Watch& watch, uint64_t job_id,
                                       double unresponsive_seconds, const Log& log) {
  watch_until_done(watch, &job_id, unresponsive_seconds, log);
}

void Requester::Impl::watch_until_done(Watch& watch, uint64_t* followed,
                                       double unresponsive_seconds, const Log& log) {
  uint64_t& job_id = *followed;
  const uint64_t started_as = job_id;  // its metrics folder's: a take-in gives the job a new id
  watch.metrics_job = started_as;
  auto& failure = watch.failure;
  bool stopped = false;  // the failure is that somebody stopped the job
  std::map<int, double> last_heard;
  for (const auto& meta : plan_.nodes) last_heard[meta.node_id] = now_seconds();
  while (true) {
    timer().afterDelay(500 * kj::MILLISECONDS).wait(wait_scope());
    if (interrupt_requested()) throw Interrupted();
    if (!watch.stopping.empty()) throw NodeStopping{watch.stopping};
    if (watch.take_in) {
      // `ravnest replace` gave a dropped cluster its nodes again, or `ravnest join` added one:
      // the job goes on with it, under a new id (running_plan_change.cpp); the nodes answer anew.
      uint64_t next = 0;
      try {
        next = watch.take_in(job_id);
      } catch (const Interrupted&) {
        throw;
      } catch (const TrainFailed&) {
        throw;
      } catch (const std::exception& e) {
        // Part-way (a node lost while the others held, or that the copy of the checkpoints
        // needed): the job stopped at the hold, each node with its checkpoint, and failed; with
        // --elastic a lost node is then replaced and the job resumed (elastic_resume.h).
        throw TrainFailed("training failed: " + std::string(e.what()), job_id, started_as);
      }
      if (next) {
        job_id = next;
        last_heard.clear();
        for (const auto& meta : plan_.nodes) last_heard[meta.node_id] = now_seconds();
        continue;
      }
    }
    for (const auto& meta : plan_.nodes) {
      if (watch.dropped.count(meta.cluster)) continue;
      // A failure of this node: with drop_failed_clusters (and another cluster left), its
      // cluster is dropped and the others go on; else the job fails.
      auto failed = [&](const std::string& why) {
        if (!failure.empty()) return;
        if (watch.drop_failed_clusters && meta.cluster >= 0 &&
            plan_.cluster_ids().size() - watch.dropped.size() > 1) {
          drop_cluster(watch, job_id, meta.cluster, why, log);
        } else {
          failure = why;
        }
      };
      try {
        const auto s = status_of(meta, 2);
        last_heard[meta.node_id] = now_seconds();
        if (!failure.empty()) continue;
        if (s.job_id != job_id) {
          failed(meta.name + " (" + meta.address + ") is no longer running the job" +
                    (s.job_id ? " (it runs job " + std::to_string(s.job_id) + ")" : ""));
        } else if (s.state == wire::NodeState::kFailed) {
          failed(meta.name + ": " + s.error);
        } else if (s.state == wire::NodeState::kIdle || s.state == wire::NodeState::kReady) {
          failure = "job " + std::to_string(job_id) + " was stopped (" + meta.name + ": " +
                    (s.error.empty() ? std::string("stopped") : s.error) + ")";
          stopped = true;
        } else if (s.state == wire::NodeState::kFinished) {
          watch.finished.insert(meta.node_id);
        }
        if (meta.position == 0 && meta.cluster >= 0) {
          auto& p = watch.progress[meta.cluster];
          p.batches = s.batches;
          p.total_batches = s.total_batches;
          p.samples_per_second = s.samples_per_second;
          p.epoch = std::max(p.epoch, s.epoch);
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        const auto* call = dynamic_cast<const NodeCallError*>(&e);
        const double silent = now_seconds() - last_heard[meta.node_id];
        if (silent > unresponsive_seconds && failure.empty()) {
          failed(meta.name + " (" + meta.address + wire::kStoppedAnswering + " (" +
                 (call ? call->reason : std::string(e.what())) + "; silent for " +
                 std::to_string(static_cast<int>(silent)) + " s)");
        }
      }
    }
    report(watch);
    if (!failure.empty()) {
      throw TrainFailed(stopped ? failure : "training failed: " + failure, job_id, started_as);
    }
    size_t live_nodes = 0, live_finished = 0;
    for (const auto& meta : plan_.nodes) {
      if (watch.dropped.count(meta.cluster)) continue;
      ++live_nodes;
      live_finished += watch.finished.count(meta.node_id);
    }
    if (live_finished == live_nodes) break;
  }
}

}  // namespace ravnest::requester
