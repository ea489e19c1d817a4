// A daemon started with `--relay auto` (docs/relay.md#auto): before it registers, the tracker
// dials it back (schemas/tracker.capnp, dialBack: AutoNAT's question, "can you be reached where
// you listen?"); a daemon it cannot reach holds a port on a relay the tracker names instead of
// registering an address nobody can dial. These are the pure halves of that exchange: which
// relays the tracker names, and which of them the daemon takes. Any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "libs/tracker/membership.h"

namespace ravnest::tracker {

// The tracker's answer.
struct DialBack {
  bool reached = false;
  std::string why;                  // what failed when not reached ("connection refused", ...)
  std::vector<std::string> relays;  // where the daemon may hold a port, the first preferred
};

// The tracker's own relay as it names it: "host:port", or ":port" when it relays on a wildcard
// host ("0.0.0.0", "::", ""), which the daemon reads as the host it dials the tracker at.
std::string own_relay_address(const std::string& relay_host, unsigned port);

// The relays the tracker names: its own first (`own_relay`, "" when it offers none), then the
// live members' relay_offered in name order, each once, at most `at_most` in all.
std::vector<std::string> relays_offered(const Membership& membership, const std::string& own_relay,
                                        size_t at_most = 8);

// The relay a daemon the tracker could not reach holds its port on: the first one named that is
// a host:port (what the tracker sends is not trusted to be), a ":port" one on the host of
// `tracker_address` (the tracker's "host:port" as the daemon dials it, already checked), as
// "host:port", other than `avoid` (as this returned it: the relay the daemon lost, which it
// leaves for another; "": none avoided). nullopt when none is, or `dial_back.reached`.
std::optional<std::string> relay_to_hold(const DialBack& dial_back,
                                         const std::string& tracker_address,
                                         const std::string& avoid = "");

// How long the relay a daemon took under `--relay auto` may not hold its port before the daemon
// asks the tracker again and takes another relay it names (daemon.cpp): longer than a relay that
// restarts takes to hold the port again (its link tries every 2 s), short against the job watch's
// 6 s of silence plus the requester's drop, so that the node is at its new address by the time a
// dropped cluster is asked again.
inline constexpr double kRelayLostSeconds = 6;

}  // namespace ravnest::tracker
