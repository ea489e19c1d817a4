// ParkedThread: a thread parked between tasks: one ring's own (RingMember), so that a node's
// rings run at once without a thread being made per reduce.
//
// post() never blocks; wait() blocks until the task posted last returned. One caller at a time
// (the compute thread); destruction joins the thread, after its task.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ravnest::daemon {

class ParkedThread {
 public:
  ParkedThread() : thread_([this]() { loop(); }) {}
  ~ParkedThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  ParkedThread(const ParkedThread&) = delete;
  ParkedThread& operator=(const ParkedThread&) = delete;

  // Runs `task` (which must not throw) on the thread; wait() returns once it is done.
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = std::move(task);
      done_ = false;
    }
    wake_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&]() { return done_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&]() { return stop_ || task_ != nullptr; });
      if (task_ == nullptr) return;  // stopped
      auto task = std::move(task_);
      task_ = nullptr;
      lock.unlock();
      task();
      lock.lock();
      done_ = true;
      finished_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::function<void()> task_;
  bool done_ = true;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace ravnest::daemon
