#include "libs/daemon/rpc/thread_bridge.h"

#include <asio/post.hpp>

#include "libs/torch_support/torch_errors.h"

namespace ravnest::daemon {

void run_and_settle(const std::function<void()>& body,
                    kj::CrossThreadPromiseFulfiller<void>& fulfiller) {
  try {
    body();
    fulfiller.fulfill();
  } catch (const std::exception& e) {
    fulfiller.reject(rejection(e));
  }
}

kj::Exception rejection(const std::exception& e) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(torch_support::torch_message(e)));
}

kj::Promise<void> on_compute(asio::io_context& compute, std::function<void()> work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  // Asio takes move-only handlers: the fulfiller moves in, no shared box.
  asio::post(compute, [work = std::move(work), fulfiller = kj::mv(paf.fulfiller)]() mutable {
    run_and_settle(work, *fulfiller);
  });
  return kj::mv(paf.promise);
}

}  // namespace ravnest::daemon
