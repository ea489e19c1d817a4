// JobControl: the node's job, as the requester drives it (loadJob, start, stop, hold, status):
// its lifecycle and status. The node's files are NodeFiles' (node_files.h), which asks it
// whether a job trains and tells it when the stored stage changed; the job's progress events go
// to its listeners through JobEvents (job_events.h).
//
// It owns the job's state and makes its JobWorker (whichever of the five roles the plan gives the
// node: job_worker.h), which it sets in the node's WorkerInbox when the job starts and
// clears when the job ends; what arrives for the worker goes through the inbox. The Node methods
// and publish() run on the RPC thread, abandon_job(), defer() and the loaded job on the compute
// thread.
//
// The last job's outcome (running, finished, failed, stopped) is written to the data directory
// at every change (last_job.h) and read back at construction, so that status() reports it after
// a restart; a job found "running" then failed with the daemon. A stopped job goes idle (a
// failed one keeps its reason, a finished one stays finished). A stop names the job it stops
// (or none: whatever runs), so that a stop arriving late never ends a newer job; a node that
// missed the stop (frozen while it was sent) stops too once a peer answers that the requester
// stopped the job (PeerWatch). A task the
// worker defers runs only while that worker is still the node's job.
//
// Memory (MemoryWatch, docs/daemon.md#memory): pushStage refuses, in one line, a stage whose
// measured peak (its metadata's estimates) exceeds the daemon's budget; status reports the budget
// and use; a running job warns, once, when used bytes reach 90 % of the budget.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "libs/wire/stream_limits.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/store/checkpoint_store.h"
#include "libs/store/last_job.h"
#include "libs/daemon/job/job_events.h"
#include "libs/daemon/job/memory_watch.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/store/node_store.h"
#include "libs/daemon/job/peer_watch.h"
#include "libs/daemon/transfer/worker_inbox.h"
#include "libs/daemon/rings/ring_member.h"
#include "libs/worker/job_worker.h"
#include "libs/worker/worker_port.h"
#include "libs/wire/node_report.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"
#include "libs/wire/transfer_message.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::worker {
struct JobSetup;  // job_setup.h
}

namespace ravnest::daemon {

// How long a held job waits for its stop (JobControl::hold): 300 s, longer than any requester
// waits between its hold and its stop (60 s for the nodes to reach the boundary); the
// environment's RAVNEST_HOLD_SECONDS (seconds, > 0, at most a day) where set (tests).
double hold_limit_seconds();

class JobControl {
 public:

  // `rings`' mailbox is reset by a new job and aborted by stop(), and its rings are let go when a
  // job is loaded or abandoned; `port` is what the job's worker uses; `inbox` holds the running
  // worker (set at start, cleared when the job ends) and its mailboxes (reset by a new job,
  // aborted by stop()).
  // `links` are dropped when a job is loaded (a peer may have restarted since the last one), and
  // carry the running job's PeerWatch, which runs on `rpc`.
  // `traffic`: the node's counters, shown by status() and reset when a job is loaded.
  // `threads`: LibTorch's intra-op threads for the job, or 0 to divide the cores among the
  // plan's daemons on this host (compute_threads.h); set when a job starts. `device`: where its
  // stage computes (compute_device.h). `memory_limit`: the config's (0: none; memory_budget.h).
  JobControl(store::NodeStore& store, asio::io_context& compute, RingMember& rings,
             wire::PeerLinks& links, wire::WireTraffic& traffic, RpcThread& rpc,
             WorkerInbox& inbox, worker::WorkerPort& port, int threads = 0,
             const std::string& device = "cpu", int64_t memory_limit = 0);

  kj::Promise<void> load_job(LoadJobCall context);
  kj::Promise<void> start(StartCall context);
  kj::Promise<void> stop(StopCall context);
  // The root holds its job at an update boundary (JobWorker::hold); answered on the RPC thread,
  // never waiting for the compute thread, which may be blocked in a reduce that only another
  // cluster's progress to the boundary ends. A hold is bounded: when the job still runs
  // hold_limit_seconds() after the last hold (the requester that held it died before its stop),
  // the root stops it on every node of its cluster with one line, each writing its checkpoint
  // of the held update, so that no node stays "training" forever.
  kj::Promise<void> hold(HoldCall context);
  kj::Promise<void> status(StatusCall context);

  // Drops the running or loaded job, checkpointing it first (JobWorker::checkpoint_on_stop);
  // compute thread.
  void abandon_job();
  // SIGTERM or SIGINT while a pipeline job trains (run_daemon, on the RPC thread, before
  // abandon_job): the stop every node agrees on (docs/faults.md#stopping), as far as this node reaches: its
  // cluster's root holds at the nearest update boundary, every node of the cluster reaches it
  // (at most `timeout_seconds`), and this node tells the others to stop, so that each checkpoints
  // there and the requester following the job hears why. In a plan of several clusters, whose
  // other roots are not known here, the requester following the job (subscribe) is asked for
  // that stop instead (EventKind stopping), and this returns once it stopped the job here. With
  // no requester following, one that does not answer, or no stop within `timeout_seconds`, this
  // returns having logged one line: the job then stops as after a failure. Nothing is agreed in
  // a parameter-server plan, whose nodes share no update count.
  // `signal`: the signal's name ("SIGTERM", "SIGINT"), in the log lines and the stop's reason.
  void stop_agreed_on_shutdown(kj::WaitScope& wait_scope, kj::Timer& timer,
                               double timeout_seconds = 30,
                               const std::string& signal = "SIGTERM");
  // Runs `task` later on the compute thread if the worker that asked is still the node's job
  // (WorkerPort::defer); compute thread.
  void defer(std::function<void()> task);
  // Logs `event` and sends it to the job's listeners (JobEvents::publish); RPC thread.
  void publish(const wire::ProgressEventData& event);
  // pushStage stored a new stage (NodeFiles): its metadata is read again, and no job has run on
  // it; RPC thread.
  void stage_stored();
  // pushMetadata gave the stored stage new metadata (NodeFiles): it is read again; the last
  // job's outcome stays. RPC thread, no job loaded.
  void metadata_stored();

  // Of the stored stage. Changes only through pushStage, which is refused while a job runs, so
  // the job's threads may read it.
  const config::NodeMetadata& metadata() const { return metadata_; }
  bool has_stage() const { return store_.has_stage(); }
  // Empty when `job_id` is this node's job (and, with `loaded`, loaded or training); else why,
  // in one line naming both jobs. For the membership calls (MembershipService); RPC thread.
  std::string job_mismatch(uint64_t job_id, bool loaded) const;
  // The requester coordinates the job's ring membership (setRings epoch 0): this node's ring
  // neighbours in other clusters are no longer watched (PeerWatch), their failures being the
  // requester's to handle; RPC thread.
  void stop_watching_other_clusters();
  bool busy() const;      // a job runs; RPC thread
  bool training() const;  // a job trains; RPC thread
  // Where the node's checkpoints are (CheckpointService serves them).
  std::shared_ptr<store::CheckpointStore> checkpoint_store() const { return checkpoints_; }
  // The budget, the baseline (measured by run_daemon once it listens) and the job's warning.
  MemoryWatch& memory() { return memory_; }
  // The job's listeners (Node.subscribe); RPC thread.
  JobEvents& events() { return events_; }

 private:
  wire::NodeState effective_state(std::string* error) const;  // with mutex_ held
  void watch_peers(uint64_t job_id);
  // The addresses of this node's ring neighbours in other clusters that are not also its
  // pipeline peers.
  std::set<std::string> other_clusters_ring_peers() const;
  void watch_memory(uint64_t job_id);
  bool running(uint64_t job_id) const;  // `job_id` is this node's job and trains
  // stop_agreed_on_shutdown in a plan of several clusters: the requester's part; RPC thread.
  void ask_requester_to_stop(uint64_t job_id, const std::shared_ptr<worker::JobWorker>& worker,
                             kj::WaitScope& wait_scope, kj::Timer& timer, double timeout_seconds,
                             const std::string& signal);
  // What stop() does: `job_id` 0 stops whatever runs; RPC thread.
  kj::Promise<void> stop_job(uint64_t job_id, const std::string& reason);
  // After a hold of `job_id` at `boundary`: the stop its time limit ends in, unless a later hold
  // or the job's end came first; RPC thread.
  void bound_hold(uint64_t job_id, uint64_t boundary);

  const int threads_;
  const std::string device_;
  store::NodeStore& store_;
  asio::io_context& compute_;
  RingMember& rings_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  WorkerInbox& inbox_;
  worker::WorkerPort& port_;
  std::shared_ptr<store::CheckpointStore> checkpoints_;
  JobEvents events_;
  int stops_answering_ = 0;  // stop() calls not yet answered; RPC thread
  RpcThread& rpc_;
  uint64_t holds_ = 0;  // hold() calls that held; the newest one's limit counts; RPC thread
  PeerWatch peers_;
  MemoryWatch memory_;
  config::NodeMetadata metadata_;  // of the stored stage

  mutable std::mutex mutex_;  // guards what the RPC thread reads of the job
  wire::NodeState state_ = wire::NodeState::kIdle;
  uint64_t job_id_ = 0;
  std::string error_;
  std::shared_ptr<worker::JobSetup> pending_setup_;  // loaded, not started (compute thread)

  BackgroundTasks tasks_;  // last: cancelled before the state its tasks use
};

}  // namespace ravnest::daemon
