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
  std::shared_ptr<const NodeCredentials> credentials_;
  schema::Node::Client node_;
  std::shared_ptr<ConnectionTrust> trust_;
  std::function<void(const std::string&)> on_refused_;
  kj::Maybe<GateBytes> nonce_;  // the challenge not yet used
  bool refused_ = false;
};

// The client's side: the Node behind `gate`, usable at once (calls wait for the gate to open; a
// refusal fails them with a one-line "refused: ..." reason). `trust` is the connection's, opened
// once the daemon proved the secret too.
schema::Node::Client open_gate(schema::Gate::Client gate,
                               std::shared_ptr<const NodeCredentials> credentials,
                               std::shared_ptr<ConnectionTrust> trust);

}  // namespace ravnest::wire
