#include "libs/daemon/transfer/worker_inbox.h"

#include <asio/post.hpp>

namespace ravnest::daemon {

void WorkerInbox::set_addresses(AddressBook addresses) {
  auto book = std::make_shared<const AddressBook>(std::move(addresses));
  std::lock_guard<std::mutex> lock(mutex_);
  addresses_ = std::move(book);
}

void WorkerInbox::set(std::shared_ptr<worker::JobWorker> worker) {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_ = std::move(worker);
}

void WorkerInbox::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_.reset();
}

std::shared_ptr<worker::JobWorker> WorkerInbox::current() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return worker_;
}

std::shared_ptr<const WorkerInbox::AddressBook> WorkerInbox::addresses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return addresses_;
}

void WorkerInbox::with_worker(kj::Function<void(worker::JobWorker&)> work) {
  asio::post(compute_, [this, work = kj::mv(work)]() mutable {
    const auto worker = current();
    if (worker) work(*worker);  // outside the lock: fail() reports through the RPC thread
  });
}

void WorkerInbox::deliver(wire::TransferMessage message) {
  if (ps_worker_ && message.kind == wire::TransferKind::kPsWeights) {
    // The worker's compute thread is blocked waiting for them (ask).
    weights_.deposit(std::move(message));
    return;
  }
  if (ps_worker_ && message.kind == wire::TransferKind::kPsRows) {
    rows_.deposit(std::move(message));  // likewise
    return;
  }
  with_worker([message = std::move(message)](worker::JobWorker& worker) mutable {
    worker.receive(std::move(message));
  });
}

void WorkerInbox::fail(const std::string& why) {
  abort(why);  // a worker waiting for its servers hears it first
  with_worker([why](worker::JobWorker& worker) { worker.fail(why); });
}

std::vector<wire::TransferMessage> WorkerInbox::ask(
    Answers answers, std::vector<wire::TransferMessage> requests,
    kj::FunctionParam<void(std::vector<wire::TransferMessage>)> send) {
  if (requests.empty()) return {};
  const uint64_t step = requests.front().batch.step;
  std::vector<int> servers;
  for (const auto& request : requests) servers.push_back(request.to_node);
  send(std::move(requests));
  return (answers == Answers::kWeights ? weights_ : rows_).take(step, servers);
}

void WorkerInbox::abort(const std::string& reason) {
  weights_.abort(reason);
  rows_.abort(reason);
}

void WorkerInbox::reset() {
  weights_.reset();
  rows_.reset();
}

}  // namespace ravnest::daemon
