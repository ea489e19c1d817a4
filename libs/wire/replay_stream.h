// ReplayStream: a stream some of whose first bytes were already read (to see which protocol the
// peer speaks: protocol_mismatch.h), handing those bytes out again before the rest. Everything
// else goes to the stream it wraps (ForwardingStream). Single-threaded, like that stream.
#pragma once

#include <kj/async-io.h>

#include "libs/wire/forwarding_stream.h"

namespace ravnest::wire {

class ReplayStream final : public ForwardingStream {
 public:
  ReplayStream(kj::Own<kj::AsyncIoStream> inner, kj::Array<kj::byte> read_ahead)
      : ForwardingStream(kj::mv(inner)), ahead_(kj::mv(read_ahead)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;

 private:
  kj::Array<kj::byte> ahead_;
  size_t handed_ = 0;  // of ahead_
};

}  // namespace ravnest::wire
