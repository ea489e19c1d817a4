#include "libs/wire/gate.h"

#include <algorithm>
#include <cstring>

#include <kj/debug.h>

#include "libs/wire/kj_reason.h"
#include "libs/wire/transport_security.h"

namespace ravnest::wire {

namespace {

// `data` as GateBytes; false when it is not kGateBytes long.
bool to_gate_bytes(capnp::Data::Reader data, GateBytes& out) {
  if (data.size() != out.size()) return false;
  std::memcpy(out.data(), data.begin(), out.size());
  return true;
}

}  // namespace

capnp::Data::Reader gate_data(const GateBytes& bytes) {
  return capnp::Data::Reader(bytes.data(), bytes.size());
}

GateProofs::GateProofs(std::shared_ptr<const NodeCredentials> credentials,
                       std::shared_ptr<ConnectionTrust> trust,
                       std::function<void(const std::string&)> on_refused)
    : credentials_(std::move(credentials)),
      trust_(std::move(trust)),
      on_refused_(std::move(on_refused)) {}

GateBytes GateProofs::challenge() {
  const GateBytes nonce = fresh_nonce();
  nonce_ = nonce;
  return nonce;
}

kj::Maybe<GateBytes> GateProofs::open(capnp::Data::Reader proof,
                                      capnp::Data::Reader client_nonce_data) {
  auto refuse = [&](const std::string& logged, const char* answer) -> kj::Maybe<GateBytes> {
    if (!refused_ && on_refused_) on_refused_(logged);
    refused_ = true;
    trust_->refusal_reported = true;
    refusal_ = answer;
    return nullptr;
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
  if (!to_gate_bytes(client_nonce_data, client_nonce)) {
    return refuse("open() with a client nonce that is not 32 bytes", "refused: wrong secret");
  }
  if (!proof_matches(credentials_->gate_proof(GateSide::kClient, nonce, client_nonce),
                     proof.begin(), proof.size())) {
    return refuse("wrong secret (its gate proof is wrong)", "refused: wrong secret");
  }
  trust_->opened = true;
  return credentials_->gate_proof(GateSide::kServer, nonce, client_nonce);
}

GateOpening gate_opening(const NodeCredentials& credentials, capnp::Data::Reader nonce,
                         const char* what) {
  GateOpening opening;
  if (!to_gate_bytes(nonce, opening.nonce)) {
    kj::throwFatalException(kj_failure(std::string("refused: not a ravnest ") + what +
                                       " (its challenge is not 32 bytes)"));
  }
  opening.client_nonce = fresh_nonce();
  opening.proof = credentials.gate_proof(GateSide::kClient, opening.nonce, opening.client_nonce);
  return opening;
}

void check_server_proof(const NodeCredentials& credentials, const GateOpening& opening,
                        capnp::Data::Reader server_proof, ConnectionTrust& trust,
                        const char* what) {
  if (!proof_matches(credentials.gate_proof(GateSide::kServer, opening.nonce,
                                            opening.client_nonce),
                     server_proof.begin(), server_proof.size())) {
    kj::throwFatalException(kj_failure(std::string("refused: the ") + what +
                                       " does not know the secret (its gate proof is wrong)"));
  }
  trust.opened = true;
}

kj::Exception gate_failure(kj::Exception&& e) {
  // Under TLS 1.3 a client's handshake is over before the daemon has checked the client's
  // certificate: a daemon that refuses it says so in an alert that the first call reads (seen
  // when the client trusts the daemon's own pinned certificate).
  const std::string text = e.getDescription().cStr();
  if (text.find("OpenSSL error") != std::string::npos) return kj_failure(tls_refusal(e));
  return kj::mv(e);
}

GateServer::GateServer(std::shared_ptr<const NodeCredentials> credentials,
                       schema::Node::Client node, std::shared_ptr<ConnectionTrust> trust,
                       std::function<void(const std::string&)> on_refused)
    : proofs_(std::move(credentials), std::move(trust), std::move(on_refused)),
      node_(kj::mv(node)) {}

kj::Promise<void> GateServer::challenge(ChallengeContext context) {
  context.getResults().setNonce(gate_data(proofs_.challenge()));
  return kj::READY_NOW;
}

kj::Promise<void> GateServer::open(OpenContext context) {
  auto params = context.getParams();
  KJ_IF_MAYBE(server_proof, proofs_.open(params.getProof(), params.getClientNonce())) {
    auto results = context.getResults();
    results.setNode(node_);
    results.setServerProof(gate_data(*server_proof));
    return kj::READY_NOW;
  }
  return kj_failure(proofs_.refusal());
}

schema::Node::Client open_gate(schema::Gate::Client gate,
                               std::shared_ptr<const NodeCredentials> credentials,
                               std::shared_ptr<ConnectionTrust> trust) {
  auto opened =
      gate.challengeRequest().send().then(
          [gate, credentials, trust](
              capnp::Response<schema::Gate::ChallengeResults>&& challenge) mutable {
            const GateOpening opening = gate_opening(*credentials, challenge.getNonce(), "daemon");
            auto request = gate.openRequest();
            request.setProof(gate_data(opening.proof));
            request.setClientNonce(gate_data(opening.client_nonce));
            return request.send().then(
                [credentials, trust, opening](
                    capnp::Response<schema::Gate::OpenResults>&& open) -> schema::Node::Client {
                  check_server_proof(*credentials, opening, open.getServerProof(), *trust,
                                     "daemon");
                  return open.getNode();
                });
          })
          .catch_([](kj::Exception&& e) -> kj::Promise<schema::Node::Client> {
            return gate_failure(kj::mv(e));
          });
  return schema::Node::Client(kj::mv(opened));
}

}  // namespace ravnest::wire
