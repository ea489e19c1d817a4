#include "libs/daemon/node_service.h"

#include <memory>

#include <asio/post.hpp>

namespace ravnest::runtime {

NodeService::NodeService(NodeStore& store, std::shared_ptr<wire::TransportSecurity> security,
                         asio::io_context& compute)
    : compute_(compute),
      links_(std::move(security)),
      ring_(links_, loop_),
      job_(store, compute, ring_, links_, loop_, *this),
      checkpoints_(
          job_.checkpoint_store(), links_, loop_,
          [this]() -> const config::NodeMetadata* {
            return job_.has_stage() ? &job_.metadata() : nullptr;
          },
          [this]() { return job_.busy(); }),
      transfer_(
          links_,
          [this](wire::TransferMessage message) { job_.deliver(std::move(message)); },
          [this](const std::string& why) { job_.fail_worker(why); }),
      bench_(links_, ring_.mailbox(), loop_) {}

NodeService::~NodeService() noexcept(false) = default;

kj::Promise<void> NodeService::pushStage(PushStageContext context) {
  return job_.push_stage(context);
}
kj::Promise<void> NodeService::pushFile(PushFileContext context) {
  return job_.push_file(context);
}
kj::Promise<void> NodeService::loadJob(LoadJobContext context) { return job_.load_job(context); }
kj::Promise<void> NodeService::start(StartContext context) { return job_.start(context); }
kj::Promise<void> NodeService::stop(StopContext context) { return job_.stop(context); }
kj::Promise<void> NodeService::status(StatusContext context) { return job_.status(context); }
kj::Promise<void> NodeService::fetchStage(FetchStageContext context) {
  return job_.fetch_stage(context);
}
kj::Promise<void> NodeService::subscribe(SubscribeContext context) {
  return job_.subscribe(context);
}
kj::Promise<void> NodeService::fetchLosses(FetchLossesContext context) {
  return job_.fetch_losses(context);
}
kj::Promise<void> NodeService::checkpoints(CheckpointsContext context) {
  return checkpoints_.checkpoints(context);
}
kj::Promise<void> NodeService::storeCheckpoint(StoreCheckpointContext context) {
  return checkpoints_.store_checkpoint(context);
}
kj::Promise<void> NodeService::fetchCheckpoint(FetchCheckpointContext context) {
  return checkpoints_.fetch_checkpoint(context);
}

kj::Promise<void> NodeService::send(SendContext context) { return transfer_.send(context); }

kj::Promise<void> NodeService::openRing(OpenRingContext context) {
  return ring_.open_ring(context);
}
kj::Promise<void> NodeService::abortReduce(AbortReduceContext context) {
  return ring_.abort_reduce(context);
}

kj::Promise<void> NodeService::benchAllReduce(BenchAllReduceContext context) {
  return bench_.bench_all_reduce(context);
}

// ---- the worker's port (compute thread) -------------------------------------------------------

void NodeService::on_rpc(std::function<void()> call) {
  try {
    loop_.executor->executeSync(call);
  } catch (const kj::Exception&) {
    // The RPC loop is gone: the daemon is shutting down.
  }
}

void NodeService::send(wire::TransferMessage message) {
  auto shared = std::make_shared<wire::TransferMessage>(std::move(message));
  on_rpc([this, shared]() { transfer_.dispatch(std::move(*shared), job_.metadata().addresses); });
}

void NodeService::event(const wire::ProgressEventData& event) {
  // A copy: nothing the RPC thread runs refers to the compute thread's memory.
  on_rpc([this, copy = event]() { job_.publish(copy); });
}

void NodeService::defer(std::function<void()> task) { job_.defer(std::move(task)); }

void NodeService::checkpoint_written(const std::string& identity, uint64_t updates) {
  checkpoints_.checkpoint_written(job_.metadata(), identity, updates);
}

void NodeService::reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) {
  ring_.reduce_rings(round, work, average, job_.metadata());
}

}  // namespace ravnest::runtime
