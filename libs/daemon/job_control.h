// JobControl: the node's storage and its job, as the requester drives them (pushStage, pushFile,
// fetchStage, fetchLosses, loadJob, start, stop, status, subscribe), and the progress events the
// job's listeners receive.
//
// It owns the job's state and its JobWorker (a pipeline stage, a parameter server or an
// evaluator: job_worker.h). The Node methods and publish() run on the RPC
// thread, abandon_job(), defer() and the loaded job on the compute thread; deliver() and
// fail_worker() may be called from any thread and reach the worker on the compute thread.
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
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "libs/wire/stream_limits.h"
#include "libs/daemon/background_tasks.h"
#include "libs/daemon/checkpoint_store.h"
#include "libs/daemon/last_job.h"
#include "libs/daemon/memory_watch.h"
#include "libs/daemon/node_calls.h"
#include "libs/daemon/node_store.h"
#include "libs/daemon/peer_watch.h"
#include "libs/daemon/ps_mailbox.h"
#include "libs/daemon/ring_member.h"
#include "libs/daemon/stage_worker.h"
#include "libs/daemon/worker_port.h"
#include "libs/wire/node_report.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"
#include "libs/wire/transfer_message.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::runtime {

class JobControl {
 public:

  // `rings`' mailbox is reset by a new job and aborted by stop(), and its rings are let go when a
  // job is loaded or abandoned; `port` is what the job's worker uses.
  // `links` are dropped when a job is loaded (a peer may have restarted since the last one), and
  // carry the running job's PeerWatch, which runs on `loop`.
  // `traffic`: the node's counters, shown by status() and reset when a job is loaded.
  // `threads`: LibTorch's intra-op threads for the job, or 0 to divide the cores among the
  // plan's daemons on this host (compute_threads.h); set when a job starts. `device`: where its
  // stage computes (compute_device.h). `memory_limit`: the config's (0: none; memory_budget.h).
  JobControl(NodeStore& store, asio::io_context& compute, RingMember& rings,
             wire::PeerLinks& links, wire::WireTraffic& traffic, const RpcLoop& loop,
             WorkerPort& port, int threads = 0, const std::string& device = "cpu",
             int64_t memory_limit = 0);

  // The stage streams into a sink (schemas: pushStage); `slot` and `max_bytes` as push_file's.
  kj::Promise<void> push_stage(PushStageCall context, wire::StreamSlot slot, uint64_t max_bytes);
  // `slot` counts the file's stream against its peer's limit until the file is stored or dropped;
  // a size above `max_bytes` is refused.
  kj::Promise<void> push_file(PushFileCall context, wire::StreamSlot slot, uint64_t max_bytes);
  kj::Promise<void> load_job(LoadJobCall context);
  kj::Promise<void> start(StartCall context);
  kj::Promise<void> stop(StopCall context);
  // The root holds its job at an update boundary (JobWorker::hold); answered on the RPC thread,
  // never waiting for the compute thread, which may be blocked in a reduce that only another
  // cluster's progress to the boundary ends.
  kj::Promise<void> hold(HoldCall context);
  kj::Promise<void> status(StatusCall context);
  kj::Promise<void> fetch_stage(FetchStageCall context);
  kj::Promise<void> subscribe(SubscribeCall context);
  kj::Promise<void> fetch_losses(FetchLossesCall context);
  kj::Promise<void> fetch_predictions(FetchPredictionsCall context);

  // Drops the running or loaded job, checkpointing it first (JobWorker::checkpoint_on_stop);
  // compute thread.
  void abandon_job();
  // SIGTERM while a pipeline job trains (run_daemon, on the RPC thread, before abandon_job): the
  // stop every node agrees on (docs/faults.md#stopping), as far as this node reaches: its
  // cluster's root holds at the nearest update boundary, every node of the cluster reaches it
  // (at most `timeout_seconds`), and this node tells the others to stop, so that each checkpoints
  // there and the requester following the job hears why. In a plan of several clusters, whose
  // other roots are not known here, the requester following the job (subscribe) is asked for
  // that stop instead (EventKind stopping), and this returns once it stopped the job here. With
  // no requester following, one that does not answer, or no stop within `timeout_seconds`, this
  // returns having logged one line: the job then stops as after a failure. Nothing is agreed in
  // a parameter-server plan, whose nodes share no update count.
  void stop_agreed_on_shutdown(kj::WaitScope& wait_scope, kj::Timer& timer,
                               double timeout_seconds = 30);
  // Runs `task` later on the compute thread if the worker that asked is still the node's job
  // (WorkerPort::defer); compute thread.
  void defer(std::function<void()> task);
  // A received transfer, for the running worker (dropped when none runs).
  void deliver(wire::TransferMessage message);
  // Fails the running worker, naming `why`.
  void fail_worker(const std::string& why);
  // Logs `event` and sends it to the job's listeners; RPC thread.
  void publish(const wire::ProgressEventData& event);

  // Of the stored stage. Changes only through pushStage, which is refused while a job runs, so
  // the job's threads may read it.
  const config::NodeMetadata& metadata() const { return metadata_; }
  bool has_stage() const { return store_.has_stage(); }
  bool busy() const;  // a job runs; RPC thread
  // Where the node's checkpoints are (CheckpointService serves them).
  std::shared_ptr<CheckpointStore> checkpoint_store() const { return checkpoints_; }
  // Where a parameter-server worker waits for its servers' weights (deliver() leaves them).
  PsMailbox& ps_mailbox() { return ps_mailbox_; }
  // Where a hybrid trainer waits for the rows it looked up (psRows).
  PsMailbox& rows_mailbox() { return rows_mailbox_; }
  // The budget, the baseline (measured by run_daemon once it listens) and the job's warning.
  MemoryWatch& memory() { return memory_; }

 private:
  wire::NodeState effective_state(std::string* error) const;  // with mutex_ held
  void with_worker(std::function<void(JobWorker&)> work);     // on the compute thread
  void watch_peers(uint64_t job_id);
  void watch_memory(uint64_t job_id);
  bool running(uint64_t job_id) const;  // `job_id` is this node's job and trains
  bool training() const;                // a job trains; RPC thread
  // stop_agreed_on_shutdown in a plan of several clusters: the requester's part; RPC thread.
  void ask_requester_to_stop(uint64_t job_id, const std::shared_ptr<JobWorker>& worker,
                             kj::WaitScope& wait_scope, kj::Timer& timer, double timeout_seconds);
  // What stop() does: `job_id` 0 stops whatever runs; RPC thread.
  kj::Promise<void> stop_job(uint64_t job_id, const std::string& reason);
  void record(LastJob::Outcome outcome, uint64_t job_id, const std::string& error);  // logs failures

  const int threads_;
  const std::string device_;
  NodeStore& store_;
  asio::io_context& compute_;
  RingMember& rings_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  WorkerPort& port_;
  std::shared_ptr<CheckpointStore> checkpoints_;
  PeerWatch peers_;
  MemoryWatch memory_;
  PsMailbox ps_mailbox_;
  PsMailbox rows_mailbox_;
  std::vector<schema::ProgressListener::Client> listeners_;
  int stops_answering_ = 0;  // stop() calls not yet answered; RPC thread
  config::NodeMetadata metadata_;  // of the stored stage

  mutable std::mutex mutex_;  // guards what the RPC thread reads of the job
  wire::NodeState state_ = wire::NodeState::kIdle;
  uint64_t job_id_ = 0;
  std::string error_;
  std::shared_ptr<JobWorker> worker_;           // published for status()
  std::shared_ptr<WorkerSetup> pending_setup_;  // loaded, not started (compute thread)

  BackgroundTasks tasks_;  // last: cancelled before the state its tasks use
};

}  // namespace ravnest::runtime
