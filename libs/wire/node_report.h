// What a node tells the outside about itself: its status (asked for) and its progress events
// (pushed to listeners). schemas/ravnest.capnp (NodeStatus, ProgressEvent) describes how they
// travel; node_report_codec.h is the one place that copies them to and from it. No torch, no capnp:
// the requester's public header includes this.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace ravnest::wire {

enum class NodeState { kIdle, kReady, kTraining, kFinished, kFailed };

// "idle", "ready", "training", "finished", "failed".
const char* state_name(NodeState state);

// What a node sent and received of one kind since its job was loaded (wire_traffic.h says what a
// byte is).
struct TrafficCount {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
};

// Activations and gradients: micro-batches between stages (validation's included) and a
// parameter server's workers' gradients; rings: the all-reduce's segments between clusters;
// weights: what a parameter server sends its workers and evaluator; other: labels and random
// state.
enum class TrafficKind { kActivations, kGradients, kRings, kWeights, kOther };
inline constexpr int kTrafficKinds = 5;
// "activations", "gradients", "rings", "weights", "other".
const char* traffic_kind_name(TrafficKind kind);

struct NodeTraffic {
  TrafficCount kinds[kTrafficKinds];
  TrafficCount& operator[](TrafficKind kind) { return kinds[static_cast<int>(kind)]; }
  const TrafficCount& operator[](TrafficKind kind) const { return kinds[static_cast<int>(kind)]; }
};

struct NodeStatusData {
  std::string node;  // "node_3"
  bool has_stage = false;
  // Of the stored stage (when has_stage).
  int node_id = 0;
  int cluster = 0;
  std::string role;
  std::string stage_sha256;
  // Why the stored stage cannot be used as it is (NodeStore::stage_problem); "" when nothing is
  // wrong.
  std::string stage_problem;
  // Of the job.
  uint64_t job_id = 0;
  NodeState state = NodeState::kIdle;
  uint32_t epoch = 0;
  uint64_t updates = 0;        // optimizer updates done
  uint64_t batches = 0;
  uint64_t total_batches = 0;  // root: known; others: 0
  double last_loss = 0;
  double samples_per_second = 0;
  double busy_seconds = 0;     // computing, since the job started (busy / running: busy fraction)
  double running_seconds = 0;  // since the job started, until its last batch finished
  uint64_t resident_bytes = 0;  // the daemon's resident memory now
  // Its memory budget and use (libs/config/daemon/memory_budget.h); limit 0: no budget known.
  uint64_t memory_limit_bytes = 0;
  std::string memory_limit_source;  // "memory_limit", "cgroup memory.max", "MemTotal", ...
  uint64_t memory_baseline_bytes = 0;  // idle, measured once it listened
  uint64_t memory_used_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  std::string error;
  NodeTraffic traffic;  // since the job was loaded
};

// kWarning: the node goes on; the message says what is wrong (memory near its budget).
// kStopping: the node's daemon is shutting down (SIGTERM) in a plan of several clusters and asks
// the requester that follows the job for the stop every node agrees on (schemas: EventKind).
enum class EventKind { kStep, kValidation, kFinished, kFailed, kWarning, kStopping };

struct ProgressEventData {
  EventKind kind = EventKind::kStep;
  uint32_t epoch = 0;
  uint64_t step = 0;
  double loss = 0;
  double accuracy = 0;
  uint64_t samples = 0;
  std::string message;
  // kStep: the learning rate the batch trained with (the leaf's optimizer's, which every stage's
  // schedule shares); NaN where none is known (a parameter server's worker, an older node).
  double lr = std::nan("");
};

// An event as it travels: with the node that sent it.
struct NodeEvent {
  int node_id = 0;
  int cluster = 0;
  ProgressEventData event;
};

}  // namespace ravnest::wire
