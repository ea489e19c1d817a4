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
      ring_(links_, traffic_, loop_, shared_memory),
      job_(store, compute, ring_, links_, traffic_, loop_, *this, threads, device, memory_limit),
      checkpoints_(
          job_.checkpoint_store(), links_, loop_,
          [this]() -> const config::NodeMetadata* {
            return job_.has_stage() ? &job_.metadata() : nullptr;
          },
          [this]() { return job_.busy(); }),
      transfer_(
          links_, traffic_,
          [this](wire::TransferMessage message) { job_.deliver(std::move(message)); },
          [this](const std::string& why) { job_.fail_worker(why); }, transfer_limits(limits)),
      bench_(links_, traffic_, ring_.mailbox(), loop_, shared_memory) {}

NodeService::~NodeService() noexcept(false) = default;

// ---- the worker's port (compute thread) -------------------------------------------------------

void NodeService::on_rpc(std::function<void()> call) {
  if (rpc_queue_.post(call)) return;
  try {
    loop_.executor->executeSync(call);  // before the queue is attached
  } catch (const kj::Exception&) {
    // The RPC loop is gone: the daemon is shutting down.
  }
}

void NodeService::send(wire::TransferMessage message) {
  auto shared = std::make_shared<wire::TransferMessage>(std::move(message));
  on_rpc([this, shared]() {
    transfer_.dispatch(std::move(*shared), config::peer_addresses(job_.metadata()));
  });
}

// Sends `requests` (one per server, the same step) and waits in `mailbox` for every answer.
std::vector<wire::TransferMessage> NodeService::ask_servers(
    PsMailbox& mailbox, std::vector<wire::TransferMessage> requests) {
  if (requests.empty()) return {};
  const uint64_t step = requests.front().batch.step;
  std::vector<int> servers;
  for (const auto& request : requests) servers.push_back(request.to_node);
  auto shared = std::make_shared<std::vector<wire::TransferMessage>>(std::move(requests));
  on_rpc([this, shared]() {
    const auto addresses = config::peer_addresses(job_.metadata());
    for (auto& request : *shared) transfer_.dispatch(std::move(request), addresses);
  });
  return mailbox.take(step, servers);
}

std::vector<wire::TransferMessage> NodeService::exchange_with_servers(
    std::vector<wire::TransferMessage> pushes) {
  return ask_servers(job_.ps_mailbox(), std::move(pushes));
}

std::vector<wire::TransferMessage> NodeService::lookup_rows(
    std::vector<wire::TransferMessage> lookups) {
  return ask_servers(job_.rows_mailbox(), std::move(lookups));
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

}  // namespace ravnest::daemon
