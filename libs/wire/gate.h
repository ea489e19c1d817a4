// The gate (schemas/ravnest.capnp, interface Gate): once per connection, both ends prove that
// they know the shared secret, without sending it, and the client gets the daemon's Node.
//
//   client                                     daemon (GateServer, one per connection)
//   challenge()                          ->    nonce N (32 fresh bytes; one use)
//   open(HMAC(k, client || N || C), C)   ->    checks it; Node, HMAC(k, server || N || C)
//   checks the server's proof, then uses Node
//
// k is the gate key both derive from the secret (node_credentials.h). N is fresh per challenge
// and good for one open(), so a recorded open() replayed on another connection (or twice on
// one) proves nothing; C makes the server's proof fresh for the client. After open(), holding
// the Node is the permission: the connection's limits are lifted (guarded_stream.h) and no call
// carries the secret. Under TLS the handshake has already proved the secret both ways
// (transport_security.h); the gate keeps that proof when TLS is off (--insecure), and keeps
// every path to the Node behind it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <kj/async.h>

#include "libs/wire/guarded_stream.h"
#include "libs/wire/node_credentials.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

// The gate's proofs on the server's side, one connection's: what every gate serving a capability
// behind the secret shares (the daemon's GateServer below, the tracker's TrackerGateServer).
class GateProofs {
 public:
  GateProofs(std::shared_ptr<const NodeCredentials> credentials,
             std::shared_ptr<ConnectionTrust> trust,
             std::function<void(const std::string&)> on_refused);
  // A fresh nonce for challenge(), good for one open().
  GateBytes challenge();
  // An open()'s check: the server's proof to answer with, the connection's trust opened; or,
  // refused, nothing, the refusal reported once through `on_refused` and `refusal()` the answer.
  kj::Maybe<GateBytes> open(capnp::Data::Reader proof, capnp::Data::Reader client_nonce);
  const std::string& refusal() const { return refusal_; }

 private:
  std::shared_ptr<const NodeCredentials> credentials_;
  std::shared_ptr<ConnectionTrust> trust_;
  std::function<void(const std::string&)> on_refused_;
  kj::Maybe<GateBytes> nonce_;  // the challenge not yet used
  bool refused_ = false;
  std::string refusal_;
};

// The client's side of the proofs: the open() to send for the server's challenge `nonce`
// (throws a FAILED kj::Exception "refused: not a ravnest <what> ..." when it is not 32 bytes),
// then the check of the server's answer (throws "refused: the <what> does not know the secret").
struct GateOpening {
  GateBytes nonce{};
  GateBytes client_nonce{};
  GateBytes proof{};
};
GateOpening gate_opening(const NodeCredentials& credentials, capnp::Data::Reader nonce,
                         const char* what);
void check_server_proof(const NodeCredentials& credentials, const GateOpening& opening,
                        capnp::Data::Reader server_proof, ConnectionTrust& trust,
                        const char* what);
capnp::Data::Reader gate_data(const GateBytes& bytes);
// A failed open_gate's exception as the caller should read it (a TLS refusal in one line).
kj::Exception gate_failure(kj::Exception&& e);

// The daemon's side, one per connection. A refusal fails the call with "refused: wrong secret"
// (one line, for the client) and is reported through `on_refused` once per connection, naming
// the peer; the daemon goes on serving.
class GateServer final : public schema::Gate::Server {
 public:
  GateServer(std::shared_ptr<const NodeCredentials> credentials, schema::Node::Client node,
             std::shared_ptr<ConnectionTrust> trust,
             std::function<void(const std::string&)> on_refused);

 protected:
  kj::Promise<void> challenge(ChallengeContext context) override;
  kj::Promise<void> open(OpenContext context) override;

 private:
  GateProofs proofs_;
  schema::Node::Client node_;
};

// The client's side: the Node behind `gate`, usable at once (calls wait for the gate to open; a
// refusal fails them with a one-line "refused: ..." reason). `trust` is the connection's, opened
// once the daemon proved the secret too.
schema::Node::Client open_gate(schema::Gate::Client gate,
                               std::shared_ptr<const NodeCredentials> credentials,
                               std::shared_ptr<ConnectionTrust> trust);

}  // namespace ravnest::wire
