#include "libs/daemon/node_service.h"

#include <memory>

#include <asio/post.hpp>

namespace ravnest::daemon {

namespace {

wire::DecodeLimits transfer_limits(const config::DaemonLimits& limits) {
  wire::DecodeLimits decode;
  decode.max_tensor_bytes = limits.transfer_bytes;
  decode.max_total_bytes = limits.transfer_bytes;
  return decode;
}

}  // namespace

NodeService::NodeService(store::NodeStore& store, std::shared_ptr<wire::TransportSecurity> security,
                         asio::io_context& compute, const config::DaemonLimits& limits,
                         int threads, const std::string& device, bool shared_memory,
                         int64_t memory_limit)
    : compute_(compute),
      limits_(limits),
      streams_(limits.streams_per_peer),
      links_(std::move(security)),
      ring_(links_, traffic_, rpc_, shared_memory,
            links_.security() != nullptr && links_.security()->insecure()),
      inbox_(compute),
      job_(store, compute, ring_, links_, traffic_, rpc_, inbox_, *this, threads, device, memory_limit),
      membership_(job_, ring_),
      files_(store, job_, device),
      checkpoints_(
          job_.checkpoint_store(), links_, rpc_, compute,
          [this]() -> const config::NodeMetadata* {
            return job_.has_stage() ? &job_.metadata() : nullptr;
          },
          [this]() { return job_.busy(); }),
      transfer_(links_, traffic_, inbox_, transfer_limits(limits)),
      bench_(links_, traffic_, ring_.mailbox(), rpc_, shared_memory,
             links_.security() != nullptr && links_.security()->insecure()) {}

NodeService::~NodeService() noexcept(false) = default;

// ---- the worker's port (compute thread) -------------------------------------------------------

void NodeService::send(wire::TransferMessage message) {
  // The message moves into the posted work (kj::Function is move-only: no heap box), with the
  // job's address book, computed when the job started.
  rpc_.post([this, message = std::move(message), addresses = inbox_.addresses()]() mutable {
    transfer_.dispatch(std::move(message), *addresses);
  });
}

void NodeService::send_all(std::vector<wire::TransferMessage> messages) {
  rpc_.post([this, messages = std::move(messages), addresses = inbox_.addresses()]() mutable {
    for (auto& message : messages) transfer_.dispatch(std::move(message), *addresses);
  });
}

std::vector<wire::TransferMessage> NodeService::exchange_with_servers(
    std::vector<wire::TransferMessage> pushes) {
  return inbox_.ask(WorkerInbox::Answers::kWeights, std::move(pushes),
                    [this](std::vector<wire::TransferMessage> sent) { send_all(std::move(sent)); });
}

std::vector<wire::TransferMessage> NodeService::lookup_rows(
    std::vector<wire::TransferMessage> lookups) {
  return inbox_.ask(WorkerInbox::Answers::kRows, std::move(lookups),
                    [this](std::vector<wire::TransferMessage> sent) { send_all(std::move(sent)); });
}

void NodeService::event(const wire::ProgressEventData& event) {
  // A copy: nothing the RPC thread runs refers to the compute thread's memory.
  rpc_.post([this, copy = event]() { job_.publish(copy); });
}

void NodeService::defer(std::function<void()> task) { job_.defer(std::move(task)); }

void NodeService::checkpoint_written(const std::string& identity, uint64_t updates) {
  checkpoints_.checkpoint_written(job_.metadata(), identity, updates);
}

void NodeService::reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) {
  ring_.reduce_rings(round, work, average, job_.metadata());
}

}  // namespace ravnest::daemon
