// The tracker's clients (docs/tracker.md): a requester reading the live pool (fetch_pool, blocking)
// and a daemon's link (TrackerLink: register, then heartbeat, for as long as the daemon runs).
// Both connect over wire::RpcClient with the caller's TransportSecurity (TLS from the shared
// secret) and open the tracker's gate (tracker_gate.h).
//
// Create, use and destroy on one thread, which runs a KJ event loop (wire::ThreadIo).
#pragma once

#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/timer.h>

#include "libs/tracker/dial_back.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/wire/transport_security.h"

namespace ravnest::tracker {

// The tracker at `address`'s live pool, waiting at most `timeout_seconds`. Throws
// std::runtime_error with one line: "tracker <address>: <why>" (unreachable, wrong secret, ...).
PoolSnapshot fetch_pool(const std::string& address,
                        const std::shared_ptr<wire::TransportSecurity>& security,
                        double timeout_seconds = 10);

// A daemon's registration kept alive: on each (re)connection it times an upload of
// `probe_bytes` to the tracker (its bandwidth figure), registers, then heartbeats at the interval
// the tracker asks for. A heartbeat the tracker does not know (the daemon expired) registers
// again; a lost connection (the tracker restarting) is made again every `retry_seconds`, and
// registers again. Each state change is one log line (spdlog): registered, lost, refused.
class TrackerLink {
 public:
  TrackerLink(std::string address, std::shared_ptr<wire::TransportSecurity> security,
              Registration registration, kj::Timer& timer, uint64_t probe_bytes = 4u << 20,
              double retry_seconds = 2);
  ~TrackerLink();

  // `--relay auto` (dial_back.h): before each registration, the tracker dials `port` back and
  // `decide` is given its answer; the addresses it resolves to are registered (a failure ends the
  // session, tried again as a lost connection is). Set before run().
  struct ReachCheck {
    uint16_t port = 0;
    std::function<kj::Promise<std::vector<std::string>>(const DialBack&)> decide;
  };
  void set_reach_check(ReachCheck check) { reach_ = std::move(check); }
  // With a reach check: the session asks for a dial-back again now (between heartbeats) and
  // registers what `decide` resolves to, over the same connection (the tracker takes a changed
  // address from it: membership.h). A failure is one log line, the registration kept as it was
  // and the heartbeats going on. Not registered yet: the session's own dial-back comes anyway.
  void ask_again();

  // Runs until the promise is dropped (the daemon stopping).
  kj::Promise<void> run();

  // The daemon stopping: asks the tracker to drop it now (over the connection run() holds, when
  // it is registered); never fails. Drop run()'s promise once this one is done.
  kj::Promise<void> leave();

 private:
  struct Session;
  kj::Promise<void> session();
  kj::Promise<void> heartbeats(std::shared_ptr<Session> session, double interval);
  kj::Promise<void> reach(std::shared_ptr<Session> session);  // dial-back, then decide
  kj::Promise<void> reach_again(std::shared_ptr<Session> session);

  std::string address_;
  std::shared_ptr<wire::TransportSecurity> security_;
  Registration registration_;
  kj::Timer& timer_;
  uint64_t probe_bytes_;
  double retry_seconds_;
  ReachCheck reach_;
  std::string last_problem_;  // logged once until it changes
  std::shared_ptr<Session> registered_;  // the session whose registration was accepted
  bool again_asked_ = false;                                 // ask_again() before a wait
  kj::Own<kj::PromiseFulfiller<void>> again_;                // the heartbeat wait's, cut short
};

}  // namespace ravnest::tracker
