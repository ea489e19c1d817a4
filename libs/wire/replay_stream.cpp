#include "libs/wire/replay_stream.h"

#include <cstring>

namespace ravnest::wire {

kj::Promise<size_t> ReplayStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  const size_t left = ahead_.size() - handed_;
  if (left == 0) return inner_->tryRead(buffer, minBytes, maxBytes);
  const size_t n = left < maxBytes ? left : maxBytes;
  std::memcpy(buffer, ahead_.begin() + handed_, n);
  handed_ += n;
  if (n >= minBytes) return n;
  // The rest of what was asked for comes from the stream; fewer only at its end.
  return inner_->tryRead(static_cast<kj::byte*>(buffer) + n, minBytes - n, maxBytes - n)
      .then([n](size_t more) { return n + more; });
}

}  // namespace ravnest::wire
