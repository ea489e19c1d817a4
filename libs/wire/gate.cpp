#include "libs/wire/gate.h"

#include <algorithm>
#include <cstring>

#include <kj/debug.h>

#include "libs/wire/kj_reason.h"
#include "libs/wire/transport_security.h"

namespace ravnest::wire {

namespace {

capnp::Data::Reader data_of(const GateBytes& bytes) {
  return capnp::Data::Reader(bytes.data(), bytes.size());
}

// `data` as GateBytes; false when it is not kGateBytes long.
bool to_gate_bytes(capnp::Data::Reader data, GateBytes& out) {
  if (data.size() != out.size()) return false;
  std::memcpy(out.data(), data.begin(), out.size());
  return true;
}

}  // namespace

GateServer::GateServer(std::shared_ptr<const NodeCredentials> credentials,
                       schema::Node::Client node, std::shared_ptr<ConnectionTrust> trust,
                       std::function<void(const std::string&)> on_refused)
    : credentials_(std::move(credentials)),
      node_(kj::mv(node)),
      trust_(std::move(trust)),
      on_refused_(std::move(on_refused)) {}

kj::Promise<void> GateServer::challenge(ChallengeContext context) {
  const GateBytes nonce = fresh_nonce();
  nonce_ = nonce;
  context.getResults().setNonce(data_of(nonce));
  return kj::READY_NOW;
}

kj::Promise<void> GateServer::open(OpenContext context) {
  auto params = context.getParams();
  auto refuse = [&](const std::string& logged, const char* answer) -> kj::Promise<void> {
    if (!refused_ && on_refused_) on_refused_(logged);
    refused_ = true;
    trust_->refusal_reported = true;
    return kj_failure(answer);
  };
  GateBytes nonce{};
  KJ_IF_MAYBE(fresh, nonce_) {
    nonce = *fresh;
  } else {
    return refuse("open() without a fresh challenge (a replay?)",
                  "refused: open() needs a fresh challenge()");
  }
  nonce_ = nullptr;  // one open() per challenge, right or wrong
  GateBytes client_nonce{};
  if (!to_gate_bytes(params.getClientNonce(), client_nonce)) {
    return refuse("open() with a client nonce that is not 32 bytes", "refused: wrong secret");
  }
  const auto proof = params.getProof();
  if (!proof_matches(credentials_->gate_proof(GateSide::kClient, nonce, client_nonce),
                     proof.begin(), proof.size())) {
    return refuse("wrong secret (its gate proof is wrong)", "refused: wrong secret");
  }
  trust_->opened = true;
  auto results = context.getResults();
  results.setNode(node_);
  results.setServerProof(
      data_of(credentials_->gate_proof(GateSide::kServer, nonce, client_nonce)));
  return kj::READY_NOW;
}

schema::Node::Client open_gate(schema::Gate::Client gate,
                               std::shared_ptr<const NodeCredentials> credentials,
                               std::shared_ptr<ConnectionTrust> trust) {
  auto opened =
      gate.challengeRequest().send().then(
          [gate, credentials, trust](
              capnp::Response<schema::Gate::ChallengeResults>&& challenge) mutable {
            GateBytes nonce{};
            if (!to_gate_bytes(challenge.getNonce(), nonce)) {
              kj::throwFatalException(
                  KJ_EXCEPTION(FAILED, "refused: not a ravnest daemon (its challenge is not 32 bytes)"));
            }
            const GateBytes client_nonce = fresh_nonce();
            auto request = gate.openRequest();
            request.setProof(
                data_of(credentials->gate_proof(GateSide::kClient, nonce, client_nonce)));
            request.setClientNonce(data_of(client_nonce));
            return request.send().then(
                [credentials, trust, nonce, client_nonce](
                    capnp::Response<schema::Gate::OpenResults>&& open) -> schema::Node::Client {
                  const auto proof = open.getServerProof();
                  if (!proof_matches(
                          credentials->gate_proof(GateSide::kServer, nonce, client_nonce),
                          proof.begin(), proof.size())) {
                    kj::throwFatalException(KJ_EXCEPTION(
                        FAILED, "refused: the daemon does not know the secret (its gate proof is wrong)"));
                  }
                  trust->opened = true;
                  return open.getNode();
                });
          })
          .catch_([](kj::Exception&& e) -> kj::Promise<schema::Node::Client> {
            // Under TLS 1.3 a client's handshake is over before the daemon has checked the
            // client's certificate: a daemon that refuses it says so in an alert that the first
            // call reads (seen when the client trusts the daemon's own pinned certificate).
            const std::string text = e.getDescription().cStr();
            if (text.find("OpenSSL error") != std::string::npos) return kj_failure(tls_refusal(e));
            return kj::mv(e);
          });
  return schema::Node::Client(kj::mv(opened));
}

}  // namespace ravnest::wire
