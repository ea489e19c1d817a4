// Crossings the daemon's roles share: from std exceptions to KJ ones, and from the RPC thread (KJ
// event loop) to the compute thread (Asio) or a thread of its own and back.
//
// Rejections carry the std::exception's message as their whole description (one line, a
// LibTorch error without its backtrace: torch_support::torch_message), so that the requester sees the
// reason and nothing else, and the daemon goes on serving.
#pragma once

#include <exception>
#include <functional>

#include <asio/io_context.hpp>
#include <kj/async.h>
#include <kj/debug.h>
#include <kj/timer.h>

namespace ravnest::daemon {

// The RPC thread's event loop, once the server created it (NodeService::set_rpc_executor): where
// other threads hand their calls, and its timer.
struct RpcLoop {
  const kj::Executor* executor = nullptr;
  kj::Timer* timer = nullptr;
};

// A FAILED KJ exception whose description is `e`'s message alone (KJ_EXCEPTION would add
// "e.what() = ").
kj::Exception rejection(const std::exception& e);

// Runs `body`, turning any std::exception into a KJ exception with the same message.
template <typename Body>
auto checked(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const kj::Exception&) {
    throw;
  } catch (const std::exception& e) {
    kj::throwFatalException(rejection(e));
  }
}

// Runs `work` on the compute thread; resolves on the calling (RPC) thread when it is done.
kj::Promise<void> on_compute(asio::io_context& compute, std::function<void()> work);

// Runs `body` on a thread of its own; resolves on the calling (RPC) thread when it is done.
kj::Promise<void> on_thread(std::function<void()> body);

}  // namespace ravnest::daemon
