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

void RingTransport::recv_pieces(const RingTag& tag, size_t bytes,
                                const std::function<void(size_t, const void*, size_t)>& use) {
  recv_in_place(tag, bytes, [&](const void* data) { use(0, data, bytes); });
}

}  // namespace ravnest::ring
