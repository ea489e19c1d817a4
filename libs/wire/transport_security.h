// TransportSecurity: what every connection between ravnest parties (requester <-> daemon,
// daemon <-> daemon) runs over; docs/security.md.
//
// By default TLS (kj-tls over OpenSSL 3). Both ends present the certificate the shared secret
// derives (node_credentials.h) and trust that certificate alone: no system trust store, the
// server requires a client certificate, the client checks the server's against the name
// "ravnest". A handshake therefore succeeds only between two parties that know the same secret,
// and is itself a mutual proof of it; ravnest's ends (both OpenSSL 3) agree on TLS 1.3. (kj-tls
// 0.9 cannot forbid TLS 1.2: a foreign client could force it, with ECDHE and AES-GCM or
// ChaCha20, still with both certificates checked.)
//
// With `insecure` (--insecure, for benchmarks only): plain TCP. The gate's challenge-response
// (gate.h) still keeps the secret itself off the wire, but everything else travels in clear and
// unauthenticated after the gate.
//
// Pinned certificates (a daemon's own key and certificate, `--tls-cert`/`--tls-key`, and the
// fingerprints a pool file would trust) belong in Options; not built yet (docs/security.md).
//
// Create, use and destroy on one thread: the streams it wraps live on that thread's event loop.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <kj/async-io.h>
#include <kj/memory.h>

#include "libs/wire/node_credentials.h"

namespace kj {
class TlsContext;
}

namespace ravnest::wire {

class TransportSecurity {
 public:
  struct Options {
    bool insecure = false;  // plain TCP (benchmarks only)
  };

  TransportSecurity(NodeCredentials credentials, Options options);
  ~TransportSecurity();
  TransportSecurity(const TransportSecurity&) = delete;
  TransportSecurity& operator=(const TransportSecurity&) = delete;

  bool insecure() const { return options_.insecure; }
  const std::shared_ptr<const NodeCredentials>& credentials() const { return credentials_; }

  // The TLS handshake as client (the server must show the secret's certificate) or as server
  // (the client must); `stream` as it is when insecure. A handshake that fails over the
  // certificates or the protocol rejects with a FAILED exception whose description is one line
  // starting with "refused: " (tls_refusal); a connection that breaks keeps its DISCONNECTED
  // exception. The server side has no time limit of its own: the caller bounds it.
  kj::Promise<kj::Own<kj::AsyncIoStream>> wrap_client(kj::Own<kj::AsyncIoStream> stream);
  kj::Promise<kj::Own<kj::AsyncIoStream>> wrap_server(kj::Own<kj::AsyncIoStream> stream);

 private:
  std::shared_ptr<const NodeCredentials> credentials_;
  Options options_;
  kj::Own<kj::TlsContext> tls_;  // null when insecure
};

// NodeCredentials::derive(secret) (slow on purpose: about 50 ms), then the security over them.
std::shared_ptr<TransportSecurity> make_transport_security(std::string_view secret,
                                                           bool insecure = false);

// What a failed TLS handshake means, as one line: "refused: wrong secret (TLS: certificate
// verify failed)" when a certificate was refused, "refused: TLS handshake failed: <reason>"
// otherwise (e.g. the other end speaks plain TCP: --insecure on one side only).
std::string tls_refusal(const kj::Exception& e);

}  // namespace ravnest::wire
