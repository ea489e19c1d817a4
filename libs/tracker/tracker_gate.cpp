#include "libs/tracker/tracker_gate.h"

#include "libs/wire/kj_reason.h"

namespace ravnest::tracker {

TrackerGateServer::TrackerGateServer(std::shared_ptr<const wire::NodeCredentials> credentials,
                                     schema::Tracker::Client tracker,
                                     std::shared_ptr<wire::ConnectionTrust> trust,
                                     std::function<void(const std::string&)> on_refused)
    : proofs_(std::move(credentials), std::move(trust), std::move(on_refused)),
      tracker_(kj::mv(tracker)) {}

kj::Promise<void> TrackerGateServer::challenge(ChallengeContext context) {
  context.getResults().setNonce(wire::gate_data(proofs_.challenge()));
  return kj::READY_NOW;
}

kj::Promise<void> TrackerGateServer::open(OpenContext context) {
  auto params = context.getParams();
  KJ_IF_MAYBE(server_proof, proofs_.open(params.getProof(), params.getClientNonce())) {
    auto results = context.getResults();
    results.setTracker(tracker_);
    results.setServerProof(wire::gate_data(*server_proof));
    return kj::READY_NOW;
  }
  return wire::kj_failure(proofs_.refusal());
}

schema::Tracker::Client open_tracker_gate(schema::TrackerGate::Client gate,
                                          std::shared_ptr<const wire::NodeCredentials> credentials,
                                          std::shared_ptr<wire::ConnectionTrust> trust) {
  auto opened =
      gate.challengeRequest().send().then(
          [gate, credentials, trust](
              capnp::Response<schema::TrackerGate::ChallengeResults>&& challenge) mutable {
            const auto opening =
                wire::gate_opening(*credentials, challenge.getNonce(), "tracker");
            auto request = gate.openRequest();
            request.setProof(wire::gate_data(opening.proof));
            request.setClientNonce(wire::gate_data(opening.client_nonce));
            return request.send().then(
                [credentials, trust, opening](
                    capnp::Response<schema::TrackerGate::OpenResults>&& open)
                    -> schema::Tracker::Client {
                  wire::check_server_proof(*credentials, opening, open.getServerProof(), *trust,
                                           "tracker");
                  return open.getTracker();
                });
          })
          .catch_([](kj::Exception&& e) -> kj::Promise<schema::Tracker::Client> {
            return wire::gate_failure(kj::mv(e));
          });
  return schema::Tracker::Client(kj::mv(opened));
}

}  // namespace ravnest::tracker
