// ElasticFollower: what `ravnest train JOB --elastic --tracker HOST:PORT` adds to a followed job
// (docs/tracker.md#elastic-jobs): the person who would type `ravnest replace`. On a thread of its
// own it reads the tracker's live pool about once a second; a node of the plan that is no longer
// in it (no heartbeat for the tracker's expiry), once the train's requester dropped its cluster
// (--drop-failed-clusters, which --elastic implies), is decided on by tracker::elastic_choice:
//   - an idle registered node that fits takes its place through replace_node (replacement.h),
//     exactly as `ravnest replace OLD --with SPARE` does while a followed job runs: the spare gets
//     the stage, plan.json names it, and the train's requester brings the cluster back at the next
//     update boundary (running_plan_change.cpp), saying "cluster C rejoined after update U";
//   - when none fits, the cluster stays dropped (the requester already dropped it, as a manual
//     drop does) and the others train on.
// Nodes that register while the job runs (the idle ones at its start stay spares for
// replacements), enough for one more cluster cut like the first cluster still training (choose_join:
// a node that fits each stage), join it through join_nodes (joining.h), as `ravnest join NODE...
// --like C` does while a followed job runs: the requester takes the cluster in at the next update
// boundary ("cluster C joined after update U"). Not while a lost node waits for its decision.
// Each change is one line on `log` ("elastic: node_2 lost (no heartbeat for 3 s); node_3 takes its
// place in cluster 2, which rejoins at the next update boundary") and one row of elastic.csv in
// the job's metrics folder (<plan>/metrics/job_<id>, the id the job started with):
//   wall_time,job,kind,lost,replacement,cluster,line
// kind: replace, drop_cluster, join (replacement: the joined nodes, root first, ';' between) or
// handover (hand_over, below).
// A replacement that fails (the spare refuses, stopped answering) is one line too; that spare is
// not tried again for that node, and the next poll decides again.
//
// A provider stopped gracefully (SIGTERM: its daemon asks for the agreed stop, docs/faults.md#stopping,
// and leaves the tracker at once) is hand_over's, below, once the job stopped at that update.
//
// Not here: a node the tracker lost that still answers the requester (its cluster goes on training;
// said once).
//
// Threads: the constructor starts the follower's thread (its own KJ event loop: fetch_pool and
// replace_node's Requester run on it); `log` is called on that thread, so the caller serialises
// it with its own output. The destructor stops the thread and waits for it (at most one
// replacement in progress, bounded by replace_node's own timeouts). Throws nothing after
// construction: a tracker that does not answer is said once ("elastic: tracker HOST:PORT does not
// answer (...); the job goes on, ..."), and once when it answers again.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "libs/requester/following_marker.h"
#include "libs/requester/requester.h"
#include "libs/tracker/elastic_choice.h"
#include "libs/tracker/tracker_client.h"

namespace ravnest::requester {

struct ElasticOptions {
  std::string tracker;   // HOST:PORT
  std::string plan_dir;
  std::string secret;
  bool insecure = false;
  double poll_seconds = 1;
  std::function<void(const std::string&)> log;  // called on the follower's thread
};

class ElasticFollower {
 public:
  explicit ElasticFollower(ElasticOptions options);
  ~ElasticFollower();
  ElasticFollower(const ElasticFollower&) = delete;
  ElasticFollower& operator=(const ElasticFollower&) = delete;

  // The live pool as the last poll read it: name -> first address (empty before the first
  // answer). Any thread: what the train's requester asks a dropped node at (link_rejoin.h).
  std::map<std::string, std::string> live_addresses() const;

 private:
  void run();  // the thread: a poll about every poll_seconds until stop_
  // One poll's pool (`live`: its members by name) against the plan: lost nodes to replace_lost,
  // else newcomers to join_newcomers.
  void follow_pool(const Plan& plan, const tracker::PoolSnapshot& pool,
                   const std::map<std::string, tracker::Member>& live, const Following& following);
  void replace_lost(const std::vector<tracker::ElasticChange>& changes,
                    const tracker::PoolSnapshot& pool);
  void join_newcomers(const Plan& plan, const tracker::PoolSnapshot& pool,
                      const std::map<std::string, tracker::Member>& live,
                      const std::set<std::string>& in_plan, const Following& following);
  // What the thread remembers between polls (only it touches this).
  struct Seen {
    std::set<std::string> decided;        // lost nodes acted on
    std::set<int> dropped_for_good;       // clusters no idle node fitted
    std::set<std::string> said_training;  // lost nodes whose cluster still trained, said once
    std::set<std::string> failed;         // spares or newcomers that failed, not tried again
    std::set<std::string> spares;         // idle at the job's start: kept for replacements
    bool spares_known = false;
    uint64_t metrics_job = 0;             // the id the job started with: its metrics folder's
  };
  Seen seen_;
  mutable std::mutex live_mutex_;
  std::map<std::string, std::string> live_addresses_;  // under live_mutex_
  ElasticOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A graceful leave handed over: the job `job_id` stopped on every node after update `boundary`
// because `stopped_by` (TrainInterrupted::stopped_by, "node_3 was stopped (SIGTERM)") was. The
// idle node elastic_choice picks from the tracker's pool takes that node's slot through
// replace_node (the checkpoints of the stop moved to it), so that resuming the job continues from
// that update with it, no update lost. Returns the line said ("elastic: node_3 left (SIGTERM)
// after update 40; node_4 takes its place in cluster 1, the job resumes from there"), also a row
// of elastic.csv (kind handover); nothing when `stopped_by` names no node of the plan or no idle
// node fits (said on `options.log`: the job stays stopped, `ravnest resume` continues it). Blocks;
// on the calling thread. Throws what fetch_pool and replace_node throw.
std::optional<std::string> hand_over(const ElasticOptions& options, const std::string& stopped_by,
                                     uint64_t job_id, uint64_t boundary);

// Which node a stop was for and by which signal, from TrainInterrupted::stopped_by as the daemon's
// agreed stop words it ("node_3 was stopped (SIGTERM)"); nothing for any other words.
struct GracefulLeave {
  std::string node, signal;
};
std::optional<GracefulLeave> graceful_leave(const std::string& stopped_by);

// The row elastic.csv gets for one change (its '\n' included; the line quoted as CSV quotes).
std::string elastic_csv_row(double wall_time, uint64_t job_id, const std::string& kind,
                            const std::string& lost, const std::string& replacement, int cluster,
                            const std::string& line);

// A stage's memory need as planned (elastic_choice's PlannedNode::need_bytes): the measured peak
// when the plan has it, else the planner's estimate.
uint64_t stage_need_bytes(const config::NodeMetadata& meta);

// Appends elastic_csv_row's row to <plan_dir>/metrics/job_<job>/elastic.csv (the header first in
// a new file); nothing when that folder does not exist, a file that cannot be written said on
// `log`. On the calling thread.
void record_elastic_change(const std::string& plan_dir, uint64_t job, const std::string& kind,
                           const std::string& lost, const std::string& replacement, int cluster,
                           const std::string& line,
                           const std::function<void(const std::string&)>& log);

}  // namespace ravnest::requester
