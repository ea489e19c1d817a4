// Following a running job from the requester: the progress the daemons report (Watch), folded
// in one event at a time (apply_event), through the listener each daemon calls back
// (ProgressListenerImpl). Requester::Impl::subscribe and watch_until_done (job_watch.cpp) use
// them; they live here so that the rest of a train (job_run.cpp) reads without them.
//
// Single-threaded like the Requester: listeners are called on its event loop.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "libs/requester/requester.h"
#include "libs/wire/node_report.h"
#include "libs/wire/node_report_codec.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::requester {

using Log = std::function<void(const std::string&)>;

// Progress, as the leaves and roots report it. Listeners may be called after train() returns
// (the daemons hold them), so what they touch is shared and switched off at the end.
struct Watch {
  std::map<int, TrainProgress> progress;
  std::set<int> finished;
  std::string failure;
  std::string stopping;  // a node asked for the agreed stop (kStopping): which, and why
  bool active = true;
  std::function<void()> report;
  std::function<void(const wire::NodeEvent&)> record;  // each event as it comes (metrics files)
  // TrainOptions::drop_failed_clusters, once the nodes accepted it (setRings epoch 0): a node's
  // failure drops its cluster (found by the status polls, so its failed event is not the job's).
  bool drop_failed_clusters = false;
  bool drop_requested = false;  // TrainOptions::drop_failed_clusters, whatever the plan
  std::set<int> dropped;               // clusters dropped
  std::vector<std::string> dropped_lines;  // why, one line each
  uint64_t ring_epoch = 0;             // the membership last sent
  // Clusters dropped on a lost connection (wire::is_lost_connection) and still dropped -> the
  // job they were dropped from: with TrainOptions::link_rejoins they come back with their own
  // nodes once those answer again (link_rejoin.h, running_plan_change.cpp).
  std::map<int, uint64_t> dropped_on_link;
  std::map<int, int> link_rejoins;       // by cluster, the rejoins after a lost connection made
  std::set<int> link_given_up;           // clusters said to stay dropped (no rejoins left)
  double link_probe_at = 0;              // when the dropped clusters' nodes may be asked again
  int link_asked_last = -1;              // the cluster whose nodes were asked last
  uint64_t metrics_job = 0;              // the id the job started with: its metrics folder's
  // Asked at every poll (running_plan_change.cpp): returns the id of the job that goes on with
  // the clusters plan.json gained (a replaced dropped cluster, a joined one), or 0 when none.
  std::function<uint64_t(uint64_t job_id)> take_in;
};

// "epoch 3/10" (an event's 0-based epoch; "epoch 3" when the job's epochs are unknown, 0): how
// validation lines say when they ran.
std::string epoch_words(uint32_t epoch, uint32_t epochs);

// Calls watch.report while the watch is active.
void report(const Watch& watch);

// One event a daemon sent, folded into the watch.
void apply_event(Watch& watch, const wire::NodeEvent& sent, const Log& on_log);

// A listener the daemons call back with progress events.
class ProgressListenerImpl final : public schema::ProgressListener::Server {
 public:
  explicit ProgressListenerImpl(std::function<void(const wire::NodeEvent&)> on_event)
      : on_event_(std::move(on_event)) {}

 protected:
  kj::Promise<void> event(EventContext context) override {
    on_event_(wire::decode_event(context.getParams().getEvent()));
    return kj::READY_NOW;
  }

 private:
  std::function<void(const wire::NodeEvent&)> on_event_;
};

}  // namespace ravnest::requester
