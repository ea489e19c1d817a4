// InProcessNode: one daemon's NodeService (node_service.h) served over a KJ two-way pipe in this
// process, with a Cap'n Proto two-party RPC system on each end, so that its control plane
// (JobControl, TransferPlane, WorkerInbox, RpcThread) is driven through the real schema without
// processes, sockets, TLS or the gate: the daemon's counterpart of the worker's LocalPort
// (tests/support/local_port.h).
//
// As run_daemon does, it makes the calling thread the RPC thread (its KJ event loop, shared
// through wire::ThreadIo) and starts a compute thread (an Asio io_context in EagerNumerics).
// node() is a client of a NodeEndpoint whose peer is "in-process"; a call made on it runs only
// while the caller waits on wait_scope(). The NodeService is plain (insecure, no secret, no
// shared memory) and reaches no peer unless a job names one.
//
// Create, use and destroy on one thread, which has no other KJ event loop than ThreadIo's.
// Destruction drops the job on the compute thread (NodeService::abandon_job), then joins it.
// Throws what NodeStore throws for an unusable data directory.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "libs/config/daemon/daemon_limits.h"
#include "libs/daemon/node_service.h"
#include "libs/store/node_store.h"
#include "libs/wire/thread_io.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class InProcessNode {
 public:
  // `data_dir`: the node's data directory (made if missing); `node`: its name in the store.
  explicit InProcessNode(const std::filesystem::path& data_dir, const std::string& node = "node-0",
                         const config::DaemonLimits& limits = {});
  InProcessNode(const InProcessNode&) = delete;
  InProcessNode& operator=(const InProcessNode&) = delete;
  ~InProcessNode() noexcept(false);

  // The daemon's Node, as a requester or a peer daemon calls it.
  schema::Node::Client& node() { return node_; }
  // This thread's event loop: where the calls on node() run.
  kj::WaitScope& wait_scope() { return io_->wait_scope(); }
  kj::Timer& timer() { return io_->timer(); }
  // The service's roles, for what the wire does not reach (the running worker, the RPC thread).
  NodeService& service() { return *service_; }
  store::NodeStore& store() { return store_; }
  asio::io_context& compute() { return compute_; }

 private:
  kj::Own<wire::ThreadIo> io_;  // first: outlives every promise below
  store::NodeStore store_;
  asio::io_context compute_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread compute_thread_;
  kj::Own<NodeService> service_;
  kj::TwoWayPipe pipe_;
  kj::Own<capnp::TwoPartyServer> server_;
  kj::Own<capnp::TwoPartyClient> client_;
  schema::Node::Client node_ = nullptr;
};

}  // namespace ravnest::daemon
