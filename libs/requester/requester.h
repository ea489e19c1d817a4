// Requester: the `ravnest` side of a plan. Talks to every node's daemon over Cap'n Proto: ships
// stages and job files, starts and watches training, collects trained stages.
//
// Single-threaded: every call runs the KJ event loop of the calling thread until it is done.
// Errors are std::runtime_error with one line that names the node and the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/wire/node_report.h"

namespace ravnest::requester {

// A plan written by `ravnest clusterize`: plan.json and nodes/node_<id>.json.
struct Plan {
  std::string dir;
  std::vector<config::NodeMetadata> nodes;  // by cluster, then pipeline position
  std::vector<int> cluster_ids() const;
  std::vector<config::NodeMetadata> cluster(int id) const;  // pipeline order
};
Plan load_plan(const std::string& dir);

struct NodeReport {
  config::NodeMetadata node;
  bool reachable = false;
  std::string state;        // the status's state by name, "unreachable", or "refused" (wrong secret)
  std::string error;        // the node's error, or why it did not answer
  wire::NodeStatusData status;  // as the node reported it (when reachable)
};

// What `ravnest train` shows while it waits.
struct TrainProgress {
  int cluster = 0;
  uint32_t epoch = 0;
  uint64_t batches = 0;
  uint64_t total_batches = 0;
  double loss = 0;
  double samples_per_second = 0;
  double elapsed_seconds = 0;
  bool has_validation = false;
  double validation_loss = 0;
  double validation_accuracy = 0;
  uint32_t epochs = 0;  // the job's, when every epoch has total_batches / epochs batches; else 0
};

struct TrainOptions {
  bool detach = false;
  // Continue from the newest checkpoint every node holds (docs/faults.md), stopping what is
  // left of the interrupted job first.
  bool resume = false;
  double unresponsive_seconds = 6;  // a node silent this long fails the job
  std::function<void(const std::vector<TrainProgress>&)> on_progress;  // per cluster
  std::function<void(const std::string&)> log;
  // Polled about ten times a second (e.g. a flag a SIGINT handler sets): once true, train()
  // stops the job everywhere and throws TrainInterrupted; with interrupt_detaches (attach()
  // sets it) it leaves the job running and returns with TrainResult::detached instead.
  std::function<bool()> interrupted;
  bool interrupt_detaches = false;
  // A plan of several clusters, followed (not detached): a cluster whose node fails, stops
  // answering or restarts is dropped (its nodes stopped, the rings' other members sent their new
  // membership: Node.setRings) and the others go on; only a failure of the last cluster left
  // fails the job (docs/faults.md#providers-that-come-and-go).
  bool drop_failed_clusters = false;
  // With drop_failed_clusters (`train --elastic`): a cluster dropped on a lost connection (a send
  // that failed, a node that stopped answering: wire/lost_connection.h) whose nodes all answer
  // again, idle, holding the plan's stage, is taken back in at the next update boundary with its
  // own nodes, at most this many times per cluster (docs/faults.md#a-dropped-cluster-rejoins).
  // 0: it stays dropped until `ravnest replace` gives it other nodes.
  int link_rejoins = 0;
  // With link_rejoins: where the tracker's live pool has each node now (name -> first address;
  // `train --elastic`: ElasticFollower::live_addresses). A node of a cluster dropped on a lost
  // connection is asked there when it differs from the plan's (its relay changed), and answering
  // as itself rejoins at that address, the plan moved there (link_rejoin.h). Unset: the plan's.
  std::function<std::map<std::string, std::string>()> live_addresses;
};

// train() was interrupted (TrainOptions::interrupted), or a node's daemon got SIGTERM and asked
// for the stop every node agrees on (a plan of several clusters: docs/faults.md#stopping): the
// job was stopped on every node that answered; `not_stopped` names the others, one line each.
class TrainInterrupted : public std::runtime_error {
 public:
  TrainInterrupted(uint64_t job_id, std::vector<std::string> not_stopped,
                   std::string stopped_by = "", std::optional<uint64_t> boundary = {});
  uint64_t job_id;
  std::vector<std::string> not_stopped;
  std::string stopped_by;  // "node_3 was stopped (SIGTERM)"; empty: the requester was interrupted
  std::optional<uint64_t> boundary;  // the update every node stopped after, when they agreed
};

// train() (or attach()) failed while the job trained: a node failed, stopped answering, moved on
// to another job or was stopped (with drop_failed_clusters: once no other cluster is left to
// train on). What is left of the job was stopped on every node that answered, each writing the
// checkpoint of its last update, before train() let this through. `train --elastic` replaces a
// node the tracker lost and resumes (elastic_resume.h).
class TrainFailed : public std::runtime_error {
 public:
  TrainFailed(const std::string& what, uint64_t job_id, uint64_t metrics_job);
  uint64_t job_id;       // the job as it failed (a take-in gives a running job a new id)
  uint64_t metrics_job;  // the id it started with: its metrics folder's name, job_<id>, if any
};

struct TrainResult {
  uint64_t job_id = 0;
  uint64_t resumed_from = 0;  // updates done before this run (resume), else 0
  double seconds = 0;
  std::vector<TrainProgress> clusters;
  uint32_t epochs = 0;  // TrainProgress::epochs: the job's epochs unless max_steps cuts them
  // Where the job's metrics files are (metrics_files.h: <plan dir>/metrics/job_<id>); empty when
  // none were written (detached, a prediction).
  std::string metrics_dir;
  bool detached = false;  // attach() was interrupted: the job goes on, nobody follows it
  // drop_failed_clusters: one line per cluster dropped ("cluster 2 dropped: node_2 ...").
  std::vector<std::string> dropped_clusters;
};

class Requester {
 public:
  // `secret`: the plan's shared secret, which opens every daemon's gate over TLS (libs/wire/gate.h,
  // transport_security.h); a daemon with another refuses every call ("refused: wrong secret").
  // `insecure`: plain TCP instead of TLS, for benchmarks only (--insecure).
  Requester(Plan plan, const std::string& secret, bool insecure = false);
  ~Requester();

  void push(const std::function<void(const std::string&)>& log);
  // Before anything is shipped, every node must answer, serve the node the plan names, hold the
  // plan's stage (else: run `ravnest push`) and run no job. A failure after the job was loaded
  // stops it on every node (and only it: a job another requester runs is never touched).
  TrainResult train(const std::string& job_path, const TrainOptions& options);
  // A prediction job (`job_text` has [predict]; `origin` names it in errors and is the base of its
  // relative paths) on the plan's nodes, as train() runs one; the plan is one cluster's
  // (docs/predict.md). Then fetch_predictions(leaf) returns what the leaf wrote.
  TrainResult predict(const std::string& job_text, const std::string& origin,
                      const TrainOptions& options);
  // The leaf `node_id`'s predictions.pt of its last prediction job (torch.save's format),
  // streamed into the file `path` (complete and checked, or left as it was); returns its size.
  uint64_t fetch_predictions(int node_id, const std::string& path);
  // Follows the job that runs on the plan's nodes (started by another requester, or by one that
  // was detached or lost its connection) as train() does, until it ends. Throws when no job, or
  // more than one, runs. An interruption (TrainOptions::interrupted) detaches: the job goes on
  // and attach() returns with `detached` set; stopping a job is stop_all()'s (`ravnest stop`).
  TrainResult attach(const TrainOptions& options);
  std::vector<NodeReport> status();
  // Stops `job_id` (0: whatever runs) on every node, after the same update on each: the roots
  // first hold it at an update boundary every node reaches (docs/faults.md#stopping), so that
  // every node's stop-time checkpoint is of that update. Returns the nodes that did not confirm, one
  // line each naming the node and why (a node that does not answer is sent the stop again over a
  // new connection: it reads it first when it answers again).
  // `timeout_seconds` bounds the wait for each node's answer (a stopped node first writes its
  // checkpoint).
  std::vector<std::string> stop_all(const std::string& reason = "ravnest stop",
                                    uint64_t job_id = 0, double timeout_seconds = 3);
  // stop_all's first half alone: the roots hold `job_id` (0: whatever runs) at one update
  // boundary, which is returned once every node reached it (none: not within `timeout_seconds`,
  // or a plan with no shared update count). A node held that no stop follows stops by itself
  // after its time limit (docs/faults.md#stopping).
  std::optional<uint64_t> hold(uint64_t job_id = 0, double timeout_seconds = 60);
  // Throws, naming the node and its last job's outcome, unless every node of the cluster
  // finished its last job with the plan's stage (what `ravnest fuse` checks first).
  void check_finished(int cluster);
  // The servers of a parameter-server plan (empty for a pipeline plan).
  std::vector<config::NodeMetadata> servers() const;
  void check_finished(const std::vector<config::NodeMetadata>& nodes);
  // The trained (or, before training, the pushed) stage of each node of the cluster, streamed
  // into `dir`/<node name>.pt (the file is complete and checked, or absent).
  struct FetchedStage {
    config::NodeMetadata metadata;
    std::string path;
    uint64_t bytes = 0;
  };
  std::vector<FetchedStage> fetch_cluster(int cluster, const std::string& dir);
  std::vector<FetchedStage> fetch_nodes(const std::vector<config::NodeMetadata>& nodes,
                                        const std::string& dir);
  // The leaf `node_id`'s losses.txt and validation.txt (leaf_metrics.h) of its last job.
  struct Losses {
    std::string losses;
    std::string validation;
  };
  Losses fetch_losses(int node_id);

  // Calls on one node `at`, in the plan or not (a spare: `ravnest replace`).
  wire::NodeStatusData status_of(const config::NodeMetadata& at, double timeout_seconds = 5);
  // Stores the stage file `stage_path` and its metadata (docs/node-metadata.md) on the node, as
  // `ravnest push` does: streamed in chunks, whatever its size. Returns the stage's size.
  uint64_t push_stage(const config::NodeMetadata& at, const std::string& stage_path,
                      const std::string& metadata_json);
  // Each of `nodes` (of the plan directory this requester has) gets its new metadata: alone
  // (pushMetadata) where the node stores the stage it names, else with the plan's stage file
  // (pushStage), said on `log` one line each. The pushMetadata calls go out together, 16 nodes at
  // a time (Impl::fan_out); the fallbacks one by one. A node that fails does not keep the
  // others from theirs; once all were tried, throws naming every failure: "the plan was
  // rewritten, but not every node has it (...); run `ravnest push` once they answer". With
  // `failed`, throws nothing: it gets each failure by node id ("NAME (ADDRESS): ...: why").
  // Blocks for the pushes.
  void push_metadata(const std::vector<config::NodeMetadata>& nodes,
                     const std::function<void(const std::string&)>& log,
                     std::map<int, std::string>* failed = nullptr);
  // The checkpoints of the job `identity` for the plan's slot (cluster, position) that the node
  // holds: its own, or copies it keeps for that slot (docs/faults.md). Ascending.
  std::vector<uint64_t> checkpoints(const config::NodeMetadata& at, const std::string& identity,
                                    int cluster, int position, double timeout_seconds = 30);
  // A checkpoint file, from the node into the file `path` / from the file `path` to the node,
  // streamed in chunks and checked (size and checksum).
  void fetch_checkpoint(const config::NodeMetadata& at, const std::string& identity, int cluster,
                        int position, uint64_t updates, const std::string& path);
  void store_checkpoint(const config::NodeMetadata& at, const std::string& identity, int cluster,
                        int position, uint64_t updates, const std::string& path);

 private:
  TrainResult run(const config::JobSpec& job, const std::string& job_text,
                  const std::string& job_path, const TrainOptions& options);
  // The clusters plan.json gained while the followed job `job_id` ran, taken in
  // (membership/running_plan_change.cpp, docs/faults.md#providers-that-come-and-go): a dropped
  // cluster that `ravnest replace` gave nodes again, a cluster `ravnest join` added. Returns the
  // id of the job that goes on with them, or 0 when plan.json (compared with `*plan_json`, then
  // updated) brings none in, or not yet (said once on `log`), or the clusters still training
  // finished the job before a boundary they could come in at (said; they stay dropped, the job
  // ends as it was). `*identity` becomes the job's identity in the grown plan. Blocks for the hold, the stop, the checkpoint copies and the load (seconds). Throws when
  // taking them in fails (the job then stops, as after any failure). A joined cluster whose
  // boundary lies at or past the grown job's end (`train_samples`: the training set's size;
  // training::join_too_late) is not taken in: said once, the job goes on as it was.
  uint64_t take_in_clusters(const std::shared_ptr<struct Watch>& watch, uint64_t job_id,
                            const config::JobSpec& job, const std::string& job_text,
                            std::string* identity, std::string* plan_json, int64_t train_samples,
                            const std::function<void(const std::string&)>& log);
  // `ravnest resume` of a job whose follower ended after a `ravnest join` and before it took the
  // cluster in: plan.json names clusters the job never ran, so no node holds a checkpoint of the
  // grown plan's identity. Finds the plan before the join (the clusters plan.json names, its
  // last ones left out, that membership::admit_clusters takes the rest in from) whose nodes hold a
  // checkpoint every one of them has; then restores damaged ones from their keepers, gives the
  // nodes that trained the grown plan's metadata and copies each stage's checkpoint to the joined
  // slots, as a followed job's take-in does. nullopt when there is no such plan. Throws when the
  // job before the join finished on every node, or a copy or push fails. Blocks for them.
  struct ResumedJoin {
    std::string identity;  // the checkpoints' (loadJob's resumeIdentity)
    uint64_t updates = 0;  // the update they resume after
  };
  std::optional<ResumedJoin> take_in_at_resume(const std::string& job_text,
                                               const std::string& job_path,
                                               const std::function<void(const std::string&)>& log);
  // Once a followed job ended: the nodes whose metadata plan.json changed since the job took its
  // plan (a join not taken in, or one that came as the job ended) get it now, so that the next
  // job runs the plan as plan.json says. A failure is said on `log` (the job is done).
  void hand_over_plan(const std::function<void(const std::string&)>& log);
  std::string waiting_for_;  // why take_in_clusters last waited, said once
  int link_rejoins_ = 0;     // the running train's TrainOptions::link_rejoins
  std::function<std::map<std::string, std::string>()> live_addresses_;  // ... ::live_addresses
  // Nodes (ids) of clusters that stayed dropped at a take-in while other nodes got new metadata:
  // theirs is pushed when their cluster comes back.
  std::set<int> metadata_owed_;
  class TakeIn;  // take_in_clusters' steps (membership/running_plan_change.cpp)
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ravnest::requester
