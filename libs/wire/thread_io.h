// ThreadIo: the calling thread's KJ event loop and asynchronous I/O (kj::setupAsyncIo), shared by
// every RPC server and connection on that thread: created by the first holder, destroyed with
// the last (as capnp::EzRpcContext does for EzRpc). A thread has at most one KJ event loop, so
// nothing else on a thread that uses ThreadIo may create one (EzRpcClient/Server included).
//
// timer() counts every delay from the clock's present. KJ's own timer reads the clock only when
// the loop waits, so on a thread that works outside the loop between waits (a command polling
// with sleeps, the dashboard serving HTTP) afterDelay(d) would count from the last wait and fire
// up to that long too early: a 3 s time limit after 20 idle seconds fired at once.
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
  kj::Timer& timer() { return timer_; }

 private:
  // The loop's timer, with now() read from the clock it follows (systemPreciseMonotonicClock).
  class PresentTimer final : public kj::Timer {
   public:
    explicit PresentTimer(kj::Timer& loop) : loop_(loop) {}
    kj::TimePoint now() const override;
    kj::Promise<void> atTime(kj::TimePoint time) override { return loop_.atTime(time); }
    kj::Promise<void> afterDelay(kj::Duration delay) override { return loop_.atTime(now() + delay); }

   private:
    kj::Timer& loop_;
  };

  kj::AsyncIoContext io_;
  PresentTimer timer_;
};

}  // namespace ravnest::wire
