// Crossings the daemon's roles share: from std exceptions to KJ ones, and from the RPC thread (KJ
// event loop) to the compute thread (Asio) and back. The way from another thread to the RPC thread
// is RpcThread (rpc_thread.h); a thread of a role's own is OwnedThreads (owned_threads.h).
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

namespace ravnest::daemon {

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

// Runs `work` on the compute thread; resolves on the calling (RPC) thread when it is done, or
// rejects with the message of what `work` threw. Never blocks the caller.
kj::Promise<void> on_compute(asio::io_context& compute, std::function<void()> work);

// Runs `body`, then fulfils `fulfiller`, or rejects it with the message of what `body` threw
// (rejection()); on whatever thread calls it.
void run_and_settle(const std::function<void()>& body,
                    kj::CrossThreadPromiseFulfiller<void>& fulfiller);

}  // namespace ravnest::daemon
