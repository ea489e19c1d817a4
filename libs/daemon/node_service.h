// NodeService: what serves the daemon's Cap'n Proto endpoint (schemas/ravnest.capnp, interface
// Node): the roles that serve its methods, which each connection's NodeEndpoint
// (node_endpoint.h) forwards to, and the stage worker's WorkerPort. The roles, each owning its
// state:
//   NodeFiles      the node's files (pushStage, pushMetadata, pushFile, fetchStage, fetchLosses,
//                  fetchPredictions)
//   JobControl     the job (loadJob, start, stop, hold, status; subscribe through JobEvents)
//   MembershipService  the ring membership the requester sets when clusters drop or join
//                  (setRings, ringRounds)
//   CheckpointService  checkpoints (listing, storing, fetching; copies to the keeper)
//   TransferPlane  micro-batches between daemons (send, and the worker's sends)
//   WorkerInbox    what arrives for the job's worker: the running worker, its mailboxes and the
//                  job's address book (set by JobControl, fed by TransferPlane)
//   RingMember     the all-reduce rings (openRing, abortReduce, the worker's reduces)
//   BenchService   the all-reduce benchmark (benchAllReduce)
// A new role is a new class and the methods that forward to it.
//
// Two threads. The RPC thread runs the KJ event loop: it stores what it receives,
// decodes transfers and keeps the connections to peer daemons. The compute thread (an Asio
// io_context) owns the job: loading it, the StageWorker, every forward and backward. RPC hands
// work to the compute thread with asio::post (on_compute, thread_bridge.h); the compute thread
// hands work back through RpcThread (rpc_thread.h): post() for sends and events, which it does
// not wait for, call() where it must (a ring's segments, a checkpoint's copy). RPC never waits
// for compute.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <kj/async.h>

#include "libs/daemon/rings/bench_service.h"
#include "libs/daemon/checkpoints/checkpoint_service.h"
#include "libs/daemon/job/job_control.h"
#include "libs/daemon/job/node_files.h"
#include "libs/daemon/membership/membership_service.h"
#include "libs/store/node_store.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/daemon/rings/ring_member.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/daemon/transfer/transfer_plane.h"
#include "libs/daemon/transfer/worker_inbox.h"
#include "libs/worker/worker_port.h"
#include "libs/config/daemon/daemon_limits.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/stream_limits.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class NodeService final : public worker::WorkerPort {
 public:
  // `security`: how the node reaches its peers (TLS with the secret's certificates, or plain with
  // --insecure) and proves the secret at their gates.
  // `limits`: what a peer may make the node hold (streams, transfers).
  // `threads`: the daemon config's (compute_threads.h; 0 = divide the cores); `device` too
  // (compute_device.h). `shared_memory`: ring segments to and from daemons on this host go
  // through shared memory (shared_segments.h). `memory_limit`: the config's (0: none), which
  // JobControl's memory budget takes into account (memory_watch.h).
  NodeService(store::NodeStore& store, std::shared_ptr<wire::TransportSecurity> security,
              asio::io_context& compute, const config::DaemonLimits& limits, int threads = 0,
              const std::string& device = "cpu", bool shared_memory = true,
              int64_t memory_limit = 0);
  // Once the RPC thread's event loop exists (the server creates it), on that thread: where the
  // other threads hand their work (RpcThread::attach).
  void set_rpc_executor(const kj::Executor& executor, kj::Timer& timer,
                        kj::LowLevelAsyncIoProvider& io) {
    rpc_.attach(executor, timer, io);
  }
  ~NodeService() noexcept(false) override;

  // Abandons the running job; called on the compute thread at shutdown.
  void abandon_job() { job_.abandon_job(); }

  // WorkerPort, called on the compute thread.
  void send(wire::TransferMessage message) override;
  void event(const wire::ProgressEventData& event) override;
  void defer(std::function<void()> task) override;
  void reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) override;
  std::vector<wire::TransferMessage> exchange_with_servers(
      std::vector<wire::TransferMessage> pushes) override;
  std::vector<wire::TransferMessage> lookup_rows(
      std::vector<wire::TransferMessage> lookups) override;
  void checkpoint_written(const std::string& identity, uint64_t updates) override;

 public:
  // The roles, for the endpoints that forward to them (node_endpoint.h); on the RPC thread.
  JobControl& job() { return job_; }
  MembershipService& membership() { return membership_; }
  NodeFiles& files() { return files_; }
  CheckpointService& checkpoints() { return checkpoints_; }
  TransferPlane& transfer() { return transfer_; }
  RingMember& ring() { return ring_; }
  // What arrives for the running worker (JobControl sets it); the RPC thread's door for the
  // other threads. For the in-process harness (in_process_node.h) and its tests.
  WorkerInbox& inbox() { return inbox_; }
  RpcThread& rpc() { return rpc_; }
  BenchService& bench() { return bench_; }
  const config::DaemonLimits& limits() const { return limits_; }
  // How many streams each peer holds open, across its connections.
  wire::StreamLimits& streams() { return streams_; }

 private:
  // Dispatches `requests` on the RPC thread, to the job's address book; never blocks.
  void send_all(std::vector<wire::TransferMessage> messages);

  asio::io_context& compute_;
  config::DaemonLimits limits_;
  wire::StreamLimits streams_;
  RpcThread rpc_;
  wire::PeerLinks links_;
  wire::WireTraffic traffic_;
  RingMember ring_;
  WorkerInbox inbox_;
  JobControl job_;
  MembershipService membership_;
  NodeFiles files_;
  CheckpointService checkpoints_;
  TransferPlane transfer_;
  BenchService bench_;
};

}  // namespace ravnest::daemon
