#include "libs/wire/node_credentials.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <stdexcept>

#include "libs/wire/openssl_ptr.h"

namespace ravnest::wire {

namespace {

// Labels: changing one changes every derived value (a new version of the scheme).
constexpr std::string_view kScryptSalt = "ravnest shared secret v1";
constexpr std::string_view kTlsKeyInfo = "ravnest tls ed25519 key v1";
constexpr std::string_view kGateKeyInfo = "ravnest gate hmac key v1";
constexpr std::string_view kClientLabel = "ravnest gate client proof v1";
constexpr std::string_view kServerLabel = "ravnest gate server proof v1";

[[noreturn]] void fail(const char* what) {
  const unsigned long code = ERR_get_error();
  char reason[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, reason, sizeof(reason));
  ERR_clear_error();
  throw std::runtime_error(std::string("cannot derive the TLS credentials: ") + what + ": " +
                           reason);
}

void require(int ok, const char* what) {
  if (ok <= 0) fail(what);
}

using Pkey = OpensslPtr<EVP_PKEY, EVP_PKEY_free>;
using PkeyCtx = OpensslPtr<EVP_PKEY_CTX, EVP_PKEY_CTX_free>;
using Cert = OpensslPtr<X509, X509_free>;
using Bio = OpensslPtr<BIO, BIO_free_all>;
using Extension = OpensslPtr<X509_EXTENSION, X509_EXTENSION_free>;

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::array<uint8_t, 32> hkdf(const std::array<uint8_t, 32>& master, std::string_view info) {
  std::array<uint8_t, 32> out{};
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  if (!ctx) fail("HKDF");
  require(EVP_PKEY_derive_init(ctx.get()), "HKDF");
  require(EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()), "HKDF");
  require(EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), master.data(), master.size()), "HKDF");
  require(EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), bytes(info), info.size()), "HKDF");
  size_t length = out.size();
  require(EVP_PKEY_derive(ctx.get(), out.data(), &length), "HKDF");
  return out;
}

void add_extension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  Extension ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext) fail("certificate extension");
  require(X509_add_ext(cert, ext.get(), -1), "certificate extension");
}

std::string hex(const unsigned char* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += digits[data[i] >> 4];
    out += digits[data[i] & 15];
  }
  return out;
}

}  // namespace

NodeCredentials NodeCredentials::derive(std::string_view secret) {
  NodeCredentials out;
  std::array<uint8_t, 32> master{};
  require(EVP_PBE_scrypt(secret.data(), secret.size(), bytes(kScryptSalt), kScryptSalt.size(),
                         uint64_t{1} << 14, 8, 1, uint64_t{64} << 20, master.data(),
                         master.size()),
          "scrypt");
  const auto seed = hkdf(master, kTlsKeyInfo);
  out.gate_key_ = hkdf(master, kGateKeyInfo);
  OPENSSL_cleanse(master.data(), master.size());

  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size()));
  if (!key) fail("Ed25519 key");
  Cert cert(X509_new());
  if (!cert) fail("certificate");
  require(X509_set_version(cert.get(), 2), "certificate version");
  require(ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1), "certificate serial");
  require(ASN1_TIME_set_string(X509_getm_notBefore(cert.get()), "20200101000000Z"),
          "certificate validity");
  require(ASN1_TIME_set_string(X509_getm_notAfter(cert.get()), "21000101000000Z"),
          "certificate validity");
  require(X509_set_pubkey(cert.get(), key.get()), "certificate key");
  X509_NAME* name = X509_get_subject_name(cert.get());
  require(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, bytes(kTlsHostName), -1, -1, 0),
          "certificate name");
  require(X509_set_issuer_name(cert.get(), name), "certificate issuer");
  add_extension(cert.get(), NID_subject_alt_name, "DNS:ravnest");
  add_extension(cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  // Ed25519 takes no separate digest; its signature depends on nothing but key and content.
  require(X509_sign(cert.get(), key.get(), nullptr), "certificate signature");

  unsigned char* der = nullptr;
  const int der_size = i2d_X509(cert.get(), &der);
  if (der_size <= 0) fail("certificate encoding");
  out.certificate_der_.assign(der, der + der_size);
  OPENSSL_free(der);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  require(EVP_Digest(out.certificate_der_.data(), out.certificate_der_.size(), digest,
                     &digest_size, EVP_sha256(), nullptr),
          "certificate fingerprint");
  out.fingerprint_ = hex(digest, digest_size);

  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio) fail("key encoding");
  require(PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr),
          "key encoding");
  char* pem = nullptr;
  const long pem_size = BIO_get_mem_data(bio.get(), &pem);
  out.key_pem_.assign(pem, static_cast<size_t>(pem_size));
  return out;
}

GateBytes NodeCredentials::gate_proof(GateSide side, const GateBytes& server_nonce,
                                      const GateBytes& client_nonce) const {
  const std::string_view label = side == GateSide::kClient ? kClientLabel : kServerLabel;
  std::string message(label);
  message.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  message.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  GateBytes out{};
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), gate_key_.data(), static_cast<int>(gate_key_.size()), bytes(message),
           message.size(), out.data(), &size) == nullptr ||
      size != out.size()) {
    fail("HMAC");
  }
  return out;
}

GateBytes fresh_nonce() {
  GateBytes out{};
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    throw std::runtime_error("no random bytes for a nonce (RAND_bytes failed)");
  }
  return out;
}

bool proof_matches(const GateBytes& expected, const uint8_t* given, size_t size) {
  return size == expected.size() && CRYPTO_memcmp(expected.data(), given, size) == 0;
}

}  // namespace ravnest::wire
