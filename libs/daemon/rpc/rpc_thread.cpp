#include "libs/daemon/rpc/rpc_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <stdexcept>

#include <spdlog/spdlog.h>

namespace ravnest::daemon {

RpcThread::~RpcThread() {
  loop_ = nullptr;  // before the stream it reads
  stream_ = nullptr;
}

void RpcThread::attach(const kj::Executor& executor, kj::Timer& timer,
                       kj::LowLevelAsyncIoProvider& io) {
  executor_ = &executor;
  timer_ = &timer;
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw std::runtime_error("cannot make an eventfd for the RPC thread");
  stream_ = io.wrapInputFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                                   kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                                   kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fd_ = fd;
  }
  loop_ = drain_when_woken().eagerlyEvaluate([](kj::Exception&& e) {
    spdlog::error("the RPC thread's work queue stopped: {}", e.getDescription().cStr());
  });
}

bool RpcThread::post(kj::Function<void()> work) {
  int wake = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fd_ < 0) return false;
    queue_.push_back(kj::mv(work));
    if (!woken_) {
      woken_ = true;
      wake = fd_;
    }
  }
  if (wake >= 0) {
    const uint64_t one = 1;
    // Only EAGAIN (the counter near overflow) can fail it, and the reader is awake then anyway.
    [[maybe_unused]] const ssize_t n = ::write(wake, &one, sizeof one);
  }
  return true;
}

kj::Promise<void> RpcThread::drain_when_woken() {
  return stream_->tryRead(&counter_, sizeof counter_, sizeof counter_).then([this](size_t read) {
    if (read < sizeof counter_) return kj::Promise<void>(kj::READY_NOW);  // closed
    drain();
    return drain_when_woken();
  });
}

void RpcThread::drain() {
  std::vector<kj::Function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work.swap(queue_);
    woken_ = false;
  }
  for (auto& w : work) {
    try {
      w();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    } catch (const kj::Exception& e) {
      spdlog::error("{}", e.getDescription().cStr());
    }
  }
}

}  // namespace ravnest::daemon
