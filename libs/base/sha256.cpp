#include "libs/base/sha256.h"

#include <cctype>

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "libs/base/config_error.h"

namespace ravnest::base {

namespace {

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string("SHA-256: ") + what + " failed (OpenSSL)");
}

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr) fail("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_);
    fail("EVP_DigestInit_ex");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(context_); }

void Sha256::update(const void* data, size_t size) {
  if (finished_) throw std::logic_error("Sha256::update after hex()");
  if (size == 0) return;
  if (EVP_DigestUpdate(context_, data, size) != 1) fail("EVP_DigestUpdate");
  length_ += size;
}

std::string Sha256::hex() {
  if (finished_) return hex_;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(context_, digest, &size) != 1) fail("EVP_DigestFinal_ex");
  static const char* digits = "0123456789abcdef";
  for (unsigned int i = 0; i < size; ++i) {
    hex_ += digits[digest[i] >> 4];
    hex_ += digits[digest[i] & 15];
  }
  finished_ = true;
  return hex_;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

}  // namespace ravnest::base

namespace ravnest::base {

std::string sha256_file_hex(const std::string& path) {
  // O_NONBLOCK: a FIFO in the file's place must not hang open(); reads of files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ConfigError(path + ": cannot read: " + std::strerror(errno));
  Sha256 hash;
  std::vector<char> chunk(1 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(path + ": cannot read: " + std::strerror(err));
    }
    if (got == 0) break;
    hash.update(chunk.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return hash.hex();
}

bool same_sha256(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace ravnest::base
