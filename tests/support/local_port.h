// LocalPort: the JobWorkers of a job in one process, connected without sockets -- the
// counterpart of LocalRing (libs/ring/ring_local.h) for the worker, so that its training can be
// tested without daemons. Each node runs the worker its role calls for (make_job_worker,
// job_setup.h): pipeline stages, and parameter servers, embedding servers and evaluators with
// their workers.
//
//  - Each worker gets a WorkerPort of its own. send() queues a delivery: at delivery the values'
//    tensors are copied into fresh memory, as the wire copies them into the receiver's buffers,
//    so that nothing aliases the sender's memory in a way the real wire would not (and a sender
//    that writes into what it sent before the delivery is seen doing so). defer() queues a task;
//    event() records the event.
//  - run() starts the workers (every non-root first: each seeds the process's CPU generator at
//    start, so the roots, whose start runs a forward at once, come last) and then runs the queue,
//    one task at a time in the order queued, until it is empty or a worker failed. Each node's
//    tasks run on a thread of its own, as on a daemon's compute thread (in EagerNumerics, with
//    LibTorch's per-thread state of its own), but only one thread runs at a time: a baton goes
//    from the scheduling thread to the node whose task runs and back. The process's CPU
//    generator goes with the baton: each node draws from a state of its own, as its own
//    process would.
//  - A call that blocks (reduce_rings, exchange_with_servers, lookup_rows) hands the baton back
//    until what it waits for is there, and the queue's other tasks run meanwhile (never one of a
//    worker whose call is still under way: as on its compute thread, a worker runs one thing at
//    a time); a blocked call whose wait is over goes on before any queued task.
//  - exchange_with_servers() and lookup_rows() send the requests and wait for every server's
//    answer. The answers (psWeights, psRows to a worker) go to the worker's mailbox instead of its
//    receive(), as the daemon's JobControl puts them in its PsMailbox; answers to an update or
//    lookup already taken are dropped there too.
//  - reduce_rings() waits for the ring's other members. When every member of a ring has come, the ring
//    runs RingAllReduce over a LocalRing, one thread per member, as the daemon does; each ring's
//    members are kept across rounds (as a daemon keeps them for a job), so that compressed
//    rings carry their error feedback from one round to the next.
//
// Limits: one job at a time; a ring is known by (ring id, round); a GPU's generator is shared.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "libs/worker/job_worker.h"
#include "libs/worker/job_setup.h"
#include "libs/worker/pipeline/stage_worker.h"

namespace ravnest::test {

class LocalPort {
 public:
  struct Event {
    int node = 0;
    worker::ProgressEventData data;
  };

  LocalPort();
  ~LocalPort();
  LocalPort(const LocalPort&) = delete;
  LocalPort& operator=(const LocalPort&) = delete;

  // Makes the worker of setup.node (one per node id), as a daemon makes it.
  worker::JobWorker& add(worker::JobSetup setup);
  worker::JobWorker& worker(int node);
  // The worker of `node`, which must be a StageWorker.
  worker::StageWorker& stage_worker(int node);

  // Runs the job to its end. Throws std::runtime_error naming the failure when a worker failed,
  // when the queue runs dry with a worker unfinished, or after `limit`.
  void run(std::chrono::milliseconds limit = std::chrono::minutes(2));

  const std::vector<Event>& events() const { return events_; }
  size_t deliveries() const { return deliveries_; }
  size_t rings_run() const { return rings_run_; }  // (ring, round) pairs reduced

 private:
  class Endpoint;
  struct Node;
  static constexpr int kNoWorker = -1;  // a task that runs no worker: a mailbox delivery
  struct Task {
    int node;
    std::function<void()> run;
  };
  struct Meeting;  // one ring's round: the members come one by one
  struct RingSet;  // one ring's transport and members, kept across rounds
  struct Mailbox;  // a worker's answers from its servers, of one kind

  void send(worker::TransferMessage message);
  void defer(int node, std::function<void()> task);
  void event(int node, const worker::ProgressEventData& data);
  void reduce_rings(int node, uint64_t round, std::vector<worker::WorkerPort::RingWork>& work,
                    bool average);
  void run_ring(int ring_id, Meeting& meeting, uint64_t round);
  // Sends `requests` from `node` (all with the same tag step) and waits for every server's
  // answer in `mailbox`.
  std::vector<worker::TransferMessage> ask_servers(int node, Mailbox& mailbox,
                                                   std::vector<worker::TransferMessage> requests);
  // Scheduling thread: resumes a blocked call whose wait is over, else runs the first queued
  // task whose worker is not busy, else tells a blocked call that nothing else can run. False
  // when there is nothing at all.
  bool run_one();
  struct Thread;  // a node's compute thread
  void thread_main(int id, Thread& thread);
  void own_generator(Thread& thread, const std::function<void()>& task);
  // Scheduling thread: node `id` runs until it hands the baton back; rethrows what escaped it.
  void switch_to(int id);
  // On node `node`'s thread: hands the baton back until `done`. Throws std::runtime_error when
  // the job failed, at the time limit (saying `while_doing`), or with `stalled` when nothing
  // else can run.
  void block_until(int node, const std::function<bool()>& done, const std::string& while_doing,
                   const std::string& stalled);
  void check_deadline(const std::string& while_doing) const;

  std::map<int, std::unique_ptr<Node>> nodes_;
  std::deque<Task> tasks_;
  std::mutex baton_mutex_;
  std::condition_variable baton_;
  int running_ = kNoWorker;  // the node whose thread runs; kNoWorker: the scheduling thread
  bool aborting_ = false;    // run() is ending: blocked calls throw
  std::map<std::pair<int, uint64_t>, std::unique_ptr<Meeting>> meetings_;
  std::map<int, std::unique_ptr<RingSet>> rings_;  // by ring id
  std::vector<Event> events_;
  std::string failure_;
  size_t deliveries_ = 0;
  size_t rings_run_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ravnest::test
