// SHA-256 of a byte string, as lowercase hex: the checksum stage files travel with. OpenSSL's
// (libcrypto, from Debian's libssl-dev) underneath.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace ravnest::base {

std::string sha256_hex(std::string_view bytes);

// The SHA-256 of a file's bytes, read in 1 MiB pieces (never the whole file in memory). Throws
// ConfigError "PATH: cannot read: why".
std::string sha256_file_hex(const std::string& path);

// Whether two SHA-256 hex strings name the same hash: hex digits compare without their case
// (a node file may carry one written in upper case by another tool).
bool same_sha256(std::string_view a, std::string_view b);

// Incremental SHA-256 for data that arrives in pieces (streamed files):
//   Sha256 h; h.update(a); h.update(b); h.hex() == sha256_hex(a + b)
// hex() finishes the hash; update() after hex() throws std::logic_error. Throws
// std::runtime_error if OpenSSL fails (out of memory).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  std::string hex();
  uint64_t size() const { return length_; }

 private:
  evp_md_ctx_st* context_;
  uint64_t length_ = 0;
  bool finished_ = false;
  std::string hex_;
};

}  // namespace ravnest::base
