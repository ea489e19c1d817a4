// NodeService: the daemon's Cap'n Proto endpoint (schemas/ravnest.capnp, interface Node) and the
// bridge between its two threads.
//
// The RPC thread runs the KJ event loop: it checks secrets, stores what it receives, decodes
// transfers and keeps the connections to peer daemons. The compute thread (an Asio io_context)
// owns the job: loading it, the StageWorker, every forward and backward. RPC hands work to the
// compute thread with asio::post; the compute thread hands sends and events back with
// kj::Executor::executeSync, which blocks compute until RPC ran them (RPC never waits for compute).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <capnp/ez-rpc.h>
#include <kj/async.h>

#include "libs/daemon/node_store.h"
#include "libs/daemon/ring_link.h"
#include "libs/daemon/ring_mailbox.h"
#include "libs/daemon/stage_worker.h"
#include "libs/daemon/transfer.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::runtime {

class NodeService final : public schema::Node::Server,
                          public WorkerPort,
                          private kj::TaskSet::ErrorHandler {
 public:
  NodeService(NodeStore& store, std::string secret, asio::io_context& compute);
  // Once the RPC thread's event loop exists (the server creates it): where the compute thread
  // hands its sends and events.
  void set_rpc_executor(const kj::Executor& executor, kj::Timer& timer) {
    rpc_executor_ = &executor;
    timer_ = &timer;
  }
  ~NodeService() noexcept(false) override;

  // Abandons the running job; called on the compute thread at shutdown.
  void abandon_job();

  // WorkerPort, called on the compute thread.
  void send(TransferMessage message) override;
  void event(const ProgressEventData& event) override;
  void defer(std::function<void()> task) override;
  void reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) override;

 protected:
  kj::Promise<void> pushStage(PushStageContext context) override;
  kj::Promise<void> pushFile(PushFileContext context) override;
  kj::Promise<void> loadJob(LoadJobContext context) override;
  kj::Promise<void> start(StartContext context) override;
  kj::Promise<void> stop(StopContext context) override;
  kj::Promise<void> status(StatusContext context) override;
  kj::Promise<void> fetchStage(FetchStageContext context) override;
  kj::Promise<void> subscribe(SubscribeContext context) override;
  kj::Promise<void> fetchLosses(FetchLossesContext context) override;
  kj::Promise<void> send(SendContext context) override;
  kj::Promise<void> openRing(OpenRingContext context) override;
  kj::Promise<void> abortReduce(AbortReduceContext context) override;
  kj::Promise<void> benchAllReduce(BenchAllReduceContext context) override;

 private:
  enum class State { kIdle, kReady, kTraining, kFinished, kFailed };

  void check_secret(capnp::Data::Reader secret, const char* method);
  kj::Promise<void> on_compute(std::function<void()> work);
  void deliver(TransferMessage message);             // RPC thread -> worker
  void dispatch(TransferMessage message);            // RPC thread: send to a peer
  void publish(const ProgressEventData& event);      // RPC thread: to listeners
  schema::Node::Client peer(int node_id);
  void fail_worker(const std::string& why);          // any thread
  State effective_state(std::string* error) const;   // with mutex_ held

  NodeStore& store_;
  std::string secret_;
  asio::io_context& compute_;
  const kj::Executor* rpc_executor_ = nullptr;
  kj::Timer* timer_ = nullptr;
  PeerLinks links_{secret_};
  RingMailbox mailbox_;
  kj::TaskSet tasks_{*this};
  std::vector<schema::ProgressListener::Client> listeners_;

  mutable std::mutex mutex_;  // guards what the RPC thread reads of the job
  State state_ = State::kIdle;
  uint64_t job_id_ = 0;
  std::string error_;
  std::shared_ptr<StageWorker> worker_;           // published for status()
  std::shared_ptr<WorkerSetup> pending_setup_;    // loaded, not started (compute thread)
  config::NodeMetadata metadata_;                 // of the loaded job

  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace ravnest::runtime
