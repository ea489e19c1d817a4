// OwnedThreads: threads a role starts from the RPC thread for work that would block it (a
// benchmark's ring), held until they end instead of detached, so that none outlives the role
// whose members its body uses.
//
// run() never blocks; the destructor blocks until every body returned. A body may call the RPC
// thread (RpcThread::call), which the RPC thread cannot answer while it sits in the destructor:
// the owner ends its bodies and waits for idle() on the running loop first (BenchService::finish).
// run(), idle() and destruction on the RPC thread.
#pragma once

#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <kj/async.h>

namespace ravnest::daemon {

class OwnedThreads {
 public:
  OwnedThreads() = default;
  OwnedThreads(const OwnedThreads&) = delete;
  OwnedThreads& operator=(const OwnedThreads&) = delete;
  ~OwnedThreads();

  // Runs `body` on a thread of its own; resolves on the RPC thread when it returned, or rejects
  // with the message of what it threw (rejection(), thread_bridge.h). Threads that ended before
  // are joined here.
  kj::Promise<void> run(std::function<void()> body);
  // Resolves once no body runs (at once when none does).
  kj::Promise<void> idle();

 private:
  struct Running {
    std::thread thread;
    // Here, not in the thread's closure: a kj::Own may throw from its destructor, which
    // std::thread's state may not.
    kj::Own<kj::CrossThreadPromiseFulfiller<void>> fulfiller;
    bool done = false;
  };
  void join_ended();

  std::mutex mutex_;
  std::list<Running> threads_;  // a list: a thread refers to its entry, which must not move
  size_t running_ = 0;
  std::vector<kj::Own<kj::CrossThreadPromiseFulfiller<void>>> idle_waiters_;
};

}  // namespace ravnest::daemon
