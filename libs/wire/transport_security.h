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
// Pinned certificates (tls_identity.h): with `own` the server also shows the daemon's own
// certificate to a client that asks for kPinnedHostName; a client connecting to an address with a
// pin (set_pins) learns the certificate the node shows there once, compares its fingerprint with
// the pin, and from then on trusts that certificate alone for that node.
//
// Thread-safe: one object serves every thread of a process (the pins and the contexts made for
// them under a mutex); each stream it wraps lives on the event loop of the thread that wrapped it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <kj/async-io.h>
#include <kj/memory.h>

#include "libs/wire/node_credentials.h"
#include "libs/wire/tls_identity.h"

namespace kj {
class TlsContext;
}

namespace ravnest::wire {

class TransportSecurity {
 public:
  struct Options {
    bool insecure = false;  // plain TCP (benchmarks only)
    std::optional<TlsIdentity> own;  // the daemon's own certificate (--tls-cert, --tls-key)
  };

  TransportSecurity(NodeCredentials credentials, Options options);
  ~TransportSecurity();
  TransportSecurity(const TransportSecurity&) = delete;
  TransportSecurity& operator=(const TransportSecurity&) = delete;

  bool insecure() const { return options_.insecure; }
  const std::optional<TlsIdentity>& own() const { return options_.own; }

  // The certificates connections to these addresses ("host:port" -> SHA-256, canonical as in
  // tls_fingerprint.h) must show: replaces the pins set before. Ignored when insecure.
  void set_pins(std::map<std::string, std::string> pins);
  const std::shared_ptr<const NodeCredentials>& credentials() const { return credentials_; }

  // The TLS handshake as client (the server must show the secret's certificate) or as server
  // (the client must); `stream` as it is when insecure. A handshake that fails over the
  // certificates or the protocol rejects with a FAILED exception whose description is one line
  // starting with "refused: " (tls_refusal); a connection that breaks keeps its DISCONNECTED
  // exception. The server side has no time limit of its own: the caller bounds it.
  // `address` ("host:port", as connected to) selects the pin, if any; a pinned node whose
  // certificate differs is refused with "refused: <address> shows the certificate <sha>, not the
  // one pinned for it (<sha>)".
  kj::Promise<kj::Own<kj::AsyncIoStream>> wrap_client(kj::Own<kj::AsyncIoStream> stream,
                                                      const std::string& address = "");
  kj::Promise<kj::Own<kj::AsyncIoStream>> wrap_server(kj::Own<kj::AsyncIoStream> stream);

 private:
  struct Pinned;
  struct ServerNames;
  std::shared_ptr<const NodeCredentials> credentials_;
  Options options_;
  kj::Own<ServerNames> names_;   // before tls_, which refers to it
  kj::Own<kj::TlsContext> tls_;  // null when insecure; without `own`, the server's too
  kj::Own<kj::TlsContext> server_tls_;  // with `own`: chooses by the name asked for
  std::shared_ptr<Pinned> pinned_;
};

// NodeCredentials::derive(secret) (slow on purpose: about 50 ms), then the security over them.
std::shared_ptr<TransportSecurity> make_transport_security(
    std::string_view secret, bool insecure = false, std::optional<TlsIdentity> own = std::nullopt);

// What a failed TLS handshake means, as one line: "refused: wrong secret (TLS: certificate
// verify failed)" when a certificate was refused, kDaemonSpeaksPlain when the daemon answered
// that it runs --insecure (protocol_mismatch.h), "refused: TLS handshake failed: <reason>"
// otherwise.
std::string tls_refusal(const kj::Exception& e);

}  // namespace ravnest::wire
