// SHA-256 of a byte string, as lowercase hex: the checksum stage files travel with.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ravnest::config {

std::string sha256_hex(std::string_view bytes);

// Incremental SHA-256 for data that arrives in pieces (streamed files):
//   Sha256 h; h.update(a); h.update(b); h.hex() == sha256_hex(a + b)
// hex() finishes the hash; update() after hex() throws std::logic_error.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  std::string hex();
  uint64_t size() const { return length_; }

 private:
  std::array<uint32_t, 8> h_;
  unsigned char block_[64];
  size_t block_used_ = 0;
  uint64_t length_ = 0;
  bool finished_ = false;
  std::string hex_;
};

}  // namespace ravnest::config
