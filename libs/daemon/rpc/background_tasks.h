// BackgroundTasks: promises a role starts and does not wait for (a stream's completion, a notice
// to a peer). A failure is logged, never thrown: the daemon goes on serving. Destroying it
// cancels what is still pending. RPC thread only.
#pragma once

#include <kj/async.h>
#include <spdlog/spdlog.h>

namespace ravnest::daemon {

class BackgroundTasks final : private kj::TaskSet::ErrorHandler {
 public:
  void add(kj::Promise<void>&& promise) { tasks_.add(kj::mv(promise)); }

 private:
  void taskFailed(kj::Exception&& exception) override {
    spdlog::warn("background task failed: {}", exception.getDescription().cStr());
  }

  kj::TaskSet tasks_{*this};
};

}  // namespace ravnest::daemon
