#include "libs/tracker/tracker_gate.h"

#include <cstring>

#include <kj/debug.h>

#include "libs/wire/kj_reason.h"
#include "libs/wire/transport_security.h"

namespace ravnest::tracker {

namespace {

capnp::Data::Reader data_of(const wire::GateBytes& bytes) {
  return capnp::Data::Reader(bytes.data(), bytes.size());
}

bool to_gate_bytes(capnp::Data::Reader data, wire::GateBytes& out) {
  if (data.size() != out.size()) return false;
  std::memcpy(out.data(), data.begin(), out.size());
  return true;
}

}  // namespace

TrackerGateServer::TrackerGateServer(std::shared_ptr<const wire::NodeCredentials> credentials,
                                     schema::Tracker::Client tracker,
                                     std::shared_ptr<wire::ConnectionTrust> trust,
                                     std::function<void(const std::string&)> on_refused)
    : credentials_(std::move(credentials)),
      tracker_(kj::mv(tracker)),
      trust_(std::move(trust)),
      on_refused_(std::move(on_refused)) {}

kj::Promise<void> TrackerGateServer::challenge(ChallengeContext context) {
  const wire::GateBytes nonce = wire::fresh_nonce();
  nonce_ = nonce;
  context.getResults().setNonce(data_of(nonce));
  return kj::READY_NOW;
}

kj::Promise<void> TrackerGateServer::open(OpenContext context) {
  auto params = context.getParams();
  auto refuse = [&](const std::string& logged, const char* answer) -> kj::Promise<void> {
    if (!refused_ && on_refused_) on_refused_(logged);
    refused_ = true;
    trust_->refusal_reported = true;
    return wire::kj_failure(answer);
  };
  wire::GateBytes nonce{};
  KJ_IF_MAYBE(fresh, nonce_) {
    nonce = *fresh;
  } else {
    return refuse("open() without a fresh challenge (a replay?)",
                  "refused: open() needs a fresh challenge()");
  }
  nonce_ = nullptr;
  wire::GateBytes client_nonce{};
  if (!to_gate_bytes(params.getClientNonce(), client_nonce)) {
    return refuse("open() with a client nonce that is not 32 bytes", "refused: wrong secret");
  }
  const auto proof = params.getProof();
  if (!wire::proof_matches(
          credentials_->gate_proof(wire::GateSide::kClient, nonce, client_nonce), proof.begin(),
          proof.size())) {
    return refuse("wrong secret (its gate proof is wrong)", "refused: wrong secret");
  }
  trust_->opened = true;
  auto results = context.getResults();
  results.setTracker(tracker_);
  results.setServerProof(
      data_of(credentials_->gate_proof(wire::GateSide::kServer, nonce, client_nonce)));
  return kj::READY_NOW;
}

schema::Tracker::Client open_tracker_gate(schema::TrackerGate::Client gate,
                                          std::shared_ptr<const wire::NodeCredentials> credentials,
                                          std::shared_ptr<wire::ConnectionTrust> trust) {
  auto opened =
      gate.challengeRequest().send().then(
          [gate, credentials, trust](
              capnp::Response<schema::TrackerGate::ChallengeResults>&& challenge) mutable {
            wire::GateBytes nonce{};
            if (!to_gate_bytes(challenge.getNonce(), nonce)) {
              kj::throwFatalException(KJ_EXCEPTION(
                  FAILED, "refused: not a ravnest tracker (its challenge is not 32 bytes)"));
            }
            const wire::GateBytes client_nonce = wire::fresh_nonce();
            auto request = gate.openRequest();
            request.setProof(data_of(
                credentials->gate_proof(wire::GateSide::kClient, nonce, client_nonce)));
            request.setClientNonce(data_of(client_nonce));
            return request.send().then(
                [credentials, trust, nonce, client_nonce](
                    capnp::Response<schema::TrackerGate::OpenResults>&& open)
                    -> schema::Tracker::Client {
                  const auto proof = open.getServerProof();
                  if (!wire::proof_matches(credentials->gate_proof(wire::GateSide::kServer,
                                                                   nonce, client_nonce),
                                           proof.begin(), proof.size())) {
                    kj::throwFatalException(KJ_EXCEPTION(
                        FAILED, "refused: the tracker does not know the secret (its gate "
                                "proof is wrong)"));
                  }
                  trust->opened = true;
                  return open.getTracker();
                });
          })
          .catch_([](kj::Exception&& e) -> kj::Promise<schema::Tracker::Client> {
            const std::string text = e.getDescription().cStr();
            if (text.find("OpenSSL error") != std::string::npos) {
              return wire::kj_failure(wire::tls_refusal(e));
            }
            return kj::mv(e);
          });
  return schema::Tracker::Client(kj::mv(opened));
}

}  // namespace ravnest::tracker
