// ThreadIo: the calling thread's KJ event loop and asynchronous I/O (kj::setupAsyncIo), shared by
// every RPC server and connection on that thread: created by the first holder, destroyed with
// the last (as capnp::EzRpcContext does for EzRpc). A thread has at most one KJ event loop, so
// nothing else on a thread that uses ThreadIo may create one (EzRpcClient/Server included).
//
// Create, use and destroy on one thread.
#pragma once

#include <kj/async-io.h>
#include <kj/refcount.h>
#include <kj/timer.h>

namespace ravnest::wire {

class ThreadIo final : public kj::Refcounted {
 public:
  // This thread's, made on first use.
  static kj::Own<ThreadIo> get();

  ThreadIo();  // use get()
  ~ThreadIo() noexcept(false);

  kj::WaitScope& wait_scope() { return io_.waitScope; }
  kj::AsyncIoProvider& provider() { return *io_.provider; }
  kj::LowLevelAsyncIoProvider& low_level() { return *io_.lowLevelProvider; }
  kj::Network& network() { return io_.provider->getNetwork(); }
  kj::Timer& timer() { return io_.provider->getTimer(); }

 private:
  kj::AsyncIoContext io_;
};

}  // namespace ravnest::wire
