// LocalPort: the StageWorkers of a job in one process, connected without sockets -- the
// counterpart of LocalRing (libs/ring/ring_local.h) for the worker, so that its training can be
// tested without daemons.
//
//  - Each worker gets a WorkerPort of its own. send() queues a delivery: at delivery the values'
//    tensors are copied into fresh memory, as the wire copies them into the receiver's buffers,
//    so that nothing aliases the sender's memory in a way the real wire would not (and a sender
//    that writes into what it sent before the delivery is seen doing so). defer() queues a task;
//    event() records the event.
//  - run() starts the workers (every non-root first: each seeds the process's CPU generator at
//    start, so the roots, whose start runs a forward at once, come last) and then runs the queue,
//    one task at a time in the order queued, on the calling thread, until it is empty or a
//    worker failed. The calling thread computes in EagerNumerics, as a daemon's compute thread.
//  - reduce_rings() waits for the ring's other members by running the queue's other tasks from
//    inside the call (never one of a worker whose call is still under way: as on its compute
//    thread, a worker runs one thing at a time). When every member of a ring has come, the ring
//    runs RingAllReduce over a LocalRing, one thread per member, as the daemon does; each ring's
//    members are kept across rounds (as a daemon keeps them for a job), so that compressed
//    rings carry their error feedback from one round to the next.
//
// Limits: the workers share the process's CPU generator, so randomness is exact when at most one
// node of the process draws outside NodeMetadata::random_nodes' chain (which sets the state
// before every forward); one job at a time; a ring is known by (ring id, round).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

  // Makes the worker of setup.node (one per node id).
  worker::StageWorker& add(worker::WorkerSetup setup);
  worker::StageWorker& worker(int node);

  // Runs the job to its end. Throws std::runtime_error naming the failure when a worker failed,
  // when the queue runs dry with a worker unfinished, or after `limit`.
  void run(std::chrono::milliseconds limit = std::chrono::minutes(2));

  const std::vector<Event>& events() const { return events_; }
  size_t deliveries() const { return deliveries_; }
  size_t rings_run() const { return rings_run_; }  // (ring, round) pairs reduced

 private:
  class Endpoint;
  struct Node;
  struct Task {
    int node;
    std::function<void()> run;
  };
  struct Meeting;  // one ring's round: the members come one by one
  struct RingSet;  // one ring's transport and members, kept across rounds

  void send(worker::TransferMessage message);
  void defer(int node, std::function<void()> task);
  void event(int node, const worker::ProgressEventData& data);
  void reduce_rings(int node, uint64_t round, std::vector<worker::WorkerPort::RingWork>& work,
                    bool average);
  void run_ring(int ring_id, Meeting& meeting, uint64_t round);
  // Runs the first queued task whose worker is not busy. False when there is none.
  bool run_one();
  void check_deadline(const std::string& while_doing) const;

  std::map<int, std::unique_ptr<Node>> nodes_;
  std::deque<Task> tasks_;
  std::set<int> busy_;  // workers with a call under way (waiting in a ring, below on the stack)
  std::map<std::pair<int, uint64_t>, std::unique_ptr<Meeting>> meetings_;
  std::map<int, std::unique_ptr<RingSet>> rings_;  // by ring id
  std::vector<Event> events_;
  std::string failure_;
  size_t deliveries_ = 0;
  size_t rings_run_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ravnest::test
