// NodeCredentials: what a party derives from the plan's shared secret. Every daemon and requester
// that knows the secret derives the same values, so that nothing but proofs of knowing it ever
// travels (docs/security.md):
//   - an Ed25519 TLS key and a self-signed X.509 certificate for it (CN and DNS name "ravnest",
//     serial 1, valid from 2020 to 2100). Ed25519 signatures are deterministic, so the
//     certificate's bytes are the same everywhere; TLS contexts present it and trust nothing
//     else (transport_security.h), so a TLS handshake succeeds only between two parties that
//     derived it from the same secret;
//   - the gate's HMAC-SHA-256 key (gate.h): a proof over both sides' fresh nonces.
//
// Derivation: scrypt(secret, N = 2^14, r = 8, p = 1) gives a 32-byte master key, HKDF-SHA-256 of
// it one key per use. scrypt is slow on purpose (about 50 ms and 16 MiB): the certificate is shown
// to anyone who connects, so a guessable secret could be tried offline against its public key;
// each guess then costs as much. A secret should still be long and random.
//
// Pure OpenSSL (libcrypto); no event loop. Immutable once derived: share it freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ravnest::wire {

// The host name the certificate is issued to; clients verify the server's certificate against it.
inline constexpr const char* kTlsHostName = "ravnest";

// The gate's nonces and proofs (gate.h) are this long.
inline constexpr size_t kGateBytes = 32;
using GateBytes = std::array<uint8_t, kGateBytes>;

// Who proves: the client opening the gate, or the server answering it (a different label, so
// that one side's proof is never the other's).
enum class GateSide { kClient, kServer };

class NodeCredentials {
 public:
  // Throws std::runtime_error when OpenSSL fails (out of memory).
  static NodeCredentials derive(std::string_view secret);

  const std::string& tls_key_pem() const { return key_pem_; }  // PKCS#8, unencrypted
  const std::vector<uint8_t>& certificate_der() const { return certificate_der_; }
  // SHA-256 of the certificate's DER bytes, lowercase hex: names the credentials in logs without
  // revealing anything about the secret that the certificate does not.
  const std::string& fingerprint() const { return fingerprint_; }

  // HMAC-SHA-256(gate key, label of `side` || server_nonce || client_nonce).
  GateBytes gate_proof(GateSide side, const GateBytes& server_nonce,
                       const GateBytes& client_nonce) const;

 private:
  NodeCredentials() = default;
  std::string key_pem_;
  std::vector<uint8_t> certificate_der_;
  std::string fingerprint_;
  std::array<uint8_t, 32> gate_key_{};
};

// 32 bytes from OpenSSL's CSPRNG (RAND_bytes); throws std::runtime_error if it fails.
GateBytes fresh_nonce();

// Equal in time that does not depend on where they differ (CRYPTO_memcmp); false when `given`
// is not kGateBytes long.
bool proof_matches(const GateBytes& expected, const uint8_t* given, size_t size);

}  // namespace ravnest::wire
