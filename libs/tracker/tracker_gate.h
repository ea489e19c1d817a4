// The tracker's gate (schemas/tracker.capnp, interface TrackerGate): the daemons' gate
// (libs/wire/gate.h) with the same proofs (wire::GateProofs, gate_opening, check_server_proof),
// giving a Tracker instead of a Node.
// Once per connection: challenge(), then open() with HMAC proofs from the shared secret; a wrong
// proof fails with "refused: wrong secret" and is reported once through `on_refused`.
//
// Both ends run on their thread's KJ event loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <kj/async.h>

#include "libs/wire/gate.h"
#include "libs/wire/guarded_stream.h"
#include "libs/wire/node_credentials.h"
#include "schemas/tracker.capnp.h"

namespace ravnest::tracker {

class TrackerGateServer final : public schema::TrackerGate::Server {
 public:
  TrackerGateServer(std::shared_ptr<const wire::NodeCredentials> credentials,
                    schema::Tracker::Client tracker, std::shared_ptr<wire::ConnectionTrust> trust,
                    std::function<void(const std::string&)> on_refused);

 protected:
  kj::Promise<void> challenge(ChallengeContext context) override;
  kj::Promise<void> open(OpenContext context) override;

 private:
  wire::GateProofs proofs_;
  schema::Tracker::Client tracker_;
};

// The Tracker behind `gate`, usable at once (calls wait for the gate; a refusal fails them with a
// one-line "refused: ..." reason).
schema::Tracker::Client open_tracker_gate(schema::TrackerGate::Client gate,
                                          std::shared_ptr<const wire::NodeCredentials> credentials,
                                          std::shared_ptr<wire::ConnectionTrust> trust);

}  // namespace ravnest::tracker
