#include "libs/daemon/rpc/thread_bridge.h"

#include <memory>
#include <thread>

#include <asio/post.hpp>

#include "libs/torch_support/torch_errors.h"

namespace ravnest::daemon {

namespace {

// A fulfiller that copyable handlers can carry.
using SharedFulfiller = std::shared_ptr<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>;

void run_and_settle(const std::function<void()>& body, const SharedFulfiller& fulfiller) {
  try {
    body();
    (*fulfiller)->fulfill();
  } catch (const std::exception& e) {
    (*fulfiller)->reject(rejection(e));
  }
}

}  // namespace

kj::Exception rejection(const std::exception& e) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(torch_support::torch_message(e)));
}

kj::Promise<void> on_compute(asio::io_context& compute, std::function<void()> work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
      kj::mv(paf.fulfiller));
  asio::post(compute, [work = std::move(work), fulfiller]() { run_and_settle(work, fulfiller); });
  return kj::mv(paf.promise);
}

kj::Promise<void> on_thread(std::function<void()> body) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
      kj::mv(paf.fulfiller));
  std::thread([body = std::move(body), fulfiller]() { run_and_settle(body, fulfiller); }).detach();
  return kj::mv(paf.promise);
}

}  // namespace ravnest::daemon
