#include "libs/ring/ring_transport.h"

#include <vector>

namespace ravnest::ring {

void RingTransport::recv_in_place(const RingTag& tag, size_t bytes,
                                  const std::function<void(const void*)>& use) {
  thread_local std::vector<uint8_t> buffer;  // one segment; reused by every ring on this thread
  if (buffer.size() < bytes) buffer.resize(bytes);
  recv(tag, buffer.data(), bytes);
  use(buffer.data());
}

}  // namespace ravnest::ring
