// JobEvents: the job's progress as its listeners hear it (Node.subscribe, the requester that
// follows the job) and as the data directory keeps it: each event is logged, sent to every
// listener, and a finished or failed job's outcome is written to last_job.json (last_job.h),
// so that status() reports it after a restart.
//
// subscribe(), forget_listeners() and publish() on the RPC thread, never blocking (but
// publish_and_wait): a listener
// that went away is ignored (the job goes on; `ravnest status` still reports). record() from any
// thread; it blocks on the small file's write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kj/timer.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/store/last_job.h"
#include "libs/store/node_store.h"
#include "libs/wire/node_report.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class JobEvents {
 public:
  explicit JobEvents(store::NodeStore& store) : store_(store) {}

  kj::Promise<void> subscribe(SubscribeCall context);
  // A new job: new listeners.
  void forget_listeners() { listeners_.clear(); }
  // Logs `event` of job `job_id` on the node `self`, records the job's outcome when it finished
  // or failed, and sends the event to the listeners.
  void publish(const wire::ProgressEventData& event, const config::NodeMetadata& self,
               uint64_t job_id);
  // Whether anybody follows the job.
  bool has_listeners() const { return !listeners_.empty(); }
  // As publish(), but waits (the RPC thread's loop, through `wait_scope`, at most
  // `timeout_seconds`) for the listeners' answers, and returns how many answered: the daemon
  // shutting down asks the requester for its stop (EventKind stopping) and must know whether
  // somebody heard. Blocks; only for shutdown.
  size_t publish_and_wait(const wire::ProgressEventData& event, const config::NodeMetadata& self,
                          kj::WaitScope& wait_scope, kj::Timer& timer, double timeout_seconds);
  // Writes the outcome of job `job_id`; a file that cannot be written is logged, not thrown.
  void record(store::LastJob::Outcome outcome, uint64_t job_id, const std::string& error);

 private:
  store::NodeStore& store_;
  std::vector<schema::ProgressListener::Client> listeners_;
  BackgroundTasks tasks_;  // last: cancelled before the listeners its tasks call
};

}  // namespace ravnest::daemon
