#include "libs/daemon/rpc/owned_threads.h"

#include "libs/daemon/rpc/thread_bridge.h"

namespace ravnest::daemon {

OwnedThreads::~OwnedThreads() {
  std::list<Running> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(threads_);
  }
  for (auto& t : all) t.thread.join();
}

void OwnedThreads::join_ended() {
  std::list<Running> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->done) ended.splice(ended.end(), threads_, it);
      it = next;
    }
  }
  // Outside the lock: a thread marked done returns without taking it again.
  for (auto& t : ended) t.thread.join();
}

kj::Promise<void> OwnedThreads::run(std::function<void()> body) {
  join_ended();
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  std::lock_guard<std::mutex> lock(mutex_);
  Running& entry = threads_.emplace_back();
  entry.fulfiller = kj::mv(paf.fulfiller);
  ++running_;
  entry.thread = std::thread(
      [this, &entry, body = std::move(body)]() {
        run_and_settle(body, *entry.fulfiller);
        std::lock_guard<std::mutex> lock(mutex_);
        entry.done = true;
        if (--running_ > 0) return;
        for (auto& waiter : idle_waiters_) waiter->fulfill();
        idle_waiters_.clear();
      });
  return kj::mv(paf.promise);
}

kj::Promise<void> OwnedThreads::idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_ == 0) return kj::READY_NOW;
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  idle_waiters_.push_back(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

}  // namespace ravnest::daemon
