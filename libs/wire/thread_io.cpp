#include "libs/wire/thread_io.h"

#include <kj/debug.h>

namespace ravnest::wire {

namespace {
thread_local ThreadIo* this_thread_io = nullptr;
}

ThreadIo::ThreadIo() : io_(kj::setupAsyncIo()), timer_(io_.provider->getTimer()) {
  this_thread_io = this;
}

kj::TimePoint ThreadIo::PresentTimer::now() const {
  // Never behind the loop's own reading (kj documents the two as one clock).
  const auto present = kj::systemPreciseMonotonicClock().now();
  const auto loop = loop_.now();
  return present > loop ? present : loop;
}

ThreadIo::~ThreadIo() noexcept(false) {
  KJ_REQUIRE(this_thread_io == this, "ThreadIo destroyed on another thread than its own") {
    return;
  }
  this_thread_io = nullptr;
}

kj::Own<ThreadIo> ThreadIo::get() {
  if (this_thread_io != nullptr) return kj::addRef(*this_thread_io);
  return kj::refcounted<ThreadIo>();
}

}  // namespace ravnest::wire
