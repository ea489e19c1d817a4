#include "libs/wire/thread_io.h"

#include <kj/debug.h>

namespace ravnest::wire {

namespace {
thread_local ThreadIo* this_thread_io = nullptr;
}

ThreadIo::ThreadIo() : io_(kj::setupAsyncIo()) { this_thread_io = this; }

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
