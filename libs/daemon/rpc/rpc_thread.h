// RpcThread: the one way from any other thread (the compute thread, a ring's thread, a
// benchmark's) to the RPC thread, whose KJ event loop owns every connection, and back.
//
//   post(work)  never blocks: `work` runs on the RPC thread later, after everything posted before
//               it. For what the caller does not wait for: the worker's sends and events.
//   call(work)  blocks the calling thread until `work` ran on the RPC thread and the promise it
//               returned (if any) resolved; returns its result or throws its kj::Exception. For
//               what the caller needs done before it goes on: a ring segment handed over, a
//               checkpoint's copy started, a ring's members told.
//
// post() exists because call() is expensive: the compute thread used to hand each send over with
// kj::Executor::executeSync, which blocks until the RPC thread woke up and ran it: 180-290 us per
// send on a busy 2-core machine, inside every forward and backward
// (docs/performance.md#pipeline). post() puts the work in a FIFO, and an eventfd watched by the
// RPC thread's event loop wakes it once per batch of work (a post while a wake is pending writes
// nothing). The work is a kj::Function: move-only, so a message moves in without a heap box.
//
// attach() and destruction on the RPC thread; post(), call() and timer() from any thread.
// Never call() from the RPC thread itself (it would wait for itself).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/function.h>
#include <kj/timer.h>

namespace ravnest::daemon {

class RpcThread {
 public:
  RpcThread() = default;
  RpcThread(const RpcThread&) = delete;
  RpcThread& operator=(const RpcThread&) = delete;
  ~RpcThread();

  // On the RPC thread, once its event loop exists (the server creates it): `executor` and
  // `timer` are that loop's, `io` watches the queue. Throws std::runtime_error when no eventfd
  // can be made.
  void attach(const kj::Executor& executor, kj::Timer& timer, kj::LowLevelAsyncIoProvider& io);
  bool attached() const { return executor_ != nullptr; }

  // Any thread; never blocks. False (and `work` dropped) before attach(). A `work` that throws
  // is logged: the RPC thread goes on.
  bool post(kj::Function<void()> work);

  // Any thread but the RPC thread; blocks until `work` ran there and its promise resolved.
  // Throws kj::Exception: `work`'s, or DISCONNECTED before attach() or once the RPC thread's
  // loop is gone (shutdown).
  template <typename Work>
  auto call(Work&& work) {
    if (executor_ == nullptr) {
      kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "the RPC thread is not running"));
    }
    return executor_->executeSync(kj::fwd<Work>(work));
  }

  // The RPC loop's timer, for promises made on the RPC thread. Valid after attach().
  kj::Timer& timer() { return *timer_; }

 private:
  kj::Promise<void> drain_when_woken();
  void drain();

  const kj::Executor* executor_ = nullptr;
  kj::Timer* timer_ = nullptr;

  std::mutex mutex_;
  std::vector<kj::Function<void()>> queue_;
  bool woken_ = false;  // an eventfd write is pending: the next one is not needed
  int fd_ = -1;
  kj::Own<kj::AsyncInputStream> stream_;
  kj::Promise<void> loop_ = nullptr;
  uint64_t counter_ = 0;
};

}  // namespace ravnest::daemon
