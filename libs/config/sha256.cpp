#include "libs/config/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace ravnest::config {

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

}  // namespace ravnest::config
