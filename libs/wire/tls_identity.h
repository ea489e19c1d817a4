// Pinned certificates (docs/security.md): a daemon may show a certificate of its own, whose key
// never leaves its machine, and a pool file may pin it by fingerprint ("tls_fingerprint"), so
// that a party that learnt the shared secret (a leaked provider) still cannot pose as that node.
//
// The daemon serves both identities on one port, chosen by the name the client asks for (SNI):
// "ravnest" gets the secret's certificate (node_credentials.h), kPinnedHostName the daemon's own.
// A client that pins a node first learns the certificate it shows under kPinnedHostName
// (fetch_server_certificate: no trust is needed, the fingerprint decides), then connects trusting
// that certificate alone (transport_security.h). Clients always present the secret's certificate:
// the node's own identity says who the server is; the secret still says who may talk to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libs/wire/node_credentials.h"

namespace ravnest::wire {

// The name a daemon's own certificate must be issued to (its CN, or a DNS name among its subject
// alternative names), e.g. made with
//   openssl req -x509 -newkey ed25519 -nodes -days 3650 -subj /CN=ravnest-node \
//     -addext subjectAltName=DNS:ravnest-node -keyout tls.key -out tls.crt
inline constexpr const char* kPinnedHostName = "ravnest-node";

// A daemon's own certificate and key (--tls-cert, --tls-key).
struct TlsIdentity {
  std::string certificate_pem;
  std::string key_pem;  // unencrypted PKCS#8 or traditional PEM, as read
  std::vector<uint8_t> certificate_der;
  std::string fingerprint;  // SHA-256 of certificate_der, lowercase hex
};

// Reads and checks both files: a PEM certificate issued to kPinnedHostName and valid now (not
// expired, not valid only from a later date), and the unencrypted PEM private key of that
// certificate. Throws std::runtime_error, one line naming the file and
// what is wrong with it.
TlsIdentity load_tls_identity(const std::string& certificate_path, const std::string& key_path);

// Empty when the certificate (DER) is valid now; otherwise why not, with its dates: "is not valid
// yet (valid from 2030-01-01 00:00:00 UTC to 2031-01-01 00:00:00 UTC)", "has expired (...)".
std::string certificate_validity_problem(const std::vector<uint8_t>& certificate_der);

// SHA-256 of a certificate's DER bytes, lowercase hex (what tls_fingerprint.h's canonical form is).
std::string certificate_fingerprint(const std::vector<uint8_t>& certificate_der);

// Blocking: connects to `address` ("host:port", "[v6]:port"), shakes hands asking for
// kPinnedHostName and presenting `client`'s certificate, and returns the DER bytes of the
// certificate the server showed, without trusting it (the caller compares its fingerprint).
// Bounded by `timeout_seconds` per step. Throws std::runtime_error with the reason (one line).
std::vector<uint8_t> fetch_server_certificate(const std::string& address,
                                              const NodeCredentials& client,
                                              double timeout_seconds);

}  // namespace ravnest::wire
