// RpcQueue: work handed to the RPC thread from any other thread without waiting for it. The
// compute thread used to hand each send over with kj::Executor::executeSync, which blocks until
// the RPC thread woke up and ran it: 180-290 us per send on a busy 2-core machine, inside every
// forward and backward (docs/performance.md#pipeline). Here the work goes into a FIFO and an
// eventfd, watched by the RPC thread's event loop, wakes it once per batch of work.
//
// Thread-safe post(); attach() and destruction on the RPC thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include <kj/async-io.h>

namespace ravnest::daemon {

class RpcQueue {
 public:
  RpcQueue() = default;
  RpcQueue(const RpcQueue&) = delete;
  RpcQueue& operator=(const RpcQueue&) = delete;
  ~RpcQueue();

  // On the RPC thread, once its event loop exists. Throws std::runtime_error when no eventfd can
  // be made.
  void attach(kj::LowLevelAsyncIoProvider& io);
  // Any thread: `work` runs on the RPC thread after everything posted before it. False (and
  // `work` dropped) before attach().
  bool post(std::function<void()> work);

 private:
  kj::Promise<void> drain_when_woken();
  void drain();

  std::mutex mutex_;
  std::vector<std::function<void()>> queue_;
  bool woken_ = false;  // an eventfd write is pending: the next one is not needed
  int fd_ = -1;
  kj::Own<kj::AsyncInputStream> stream_;
  kj::Promise<void> loop_ = nullptr;
  uint64_t counter_ = 0;
};

}  // namespace ravnest::daemon
