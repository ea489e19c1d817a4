// The tracker process (`ravnest tracker`, docs/tracker.md): daemons register what they measured
// and heartbeat; requesters read the live pool. Serves schemas/tracker.capnp over the daemons' own
// transport (wire::RpcServer: TLS from the shared secret, limits before the gate opens, a cap on
// connections in all and from one host), behind a TrackerGate whose proofs are the daemons' gate's.
//
// Runs on the calling thread's KJ event loop (wire::ThreadIo), one thread in all: the membership
// (membership.h) is touched only there. Every change of membership is written to
// <state_dir>/tracker-state.json atomically (base::write_file_atomically) before it is answered,
// so a tracker killed at any moment starts again with every registration it accepted. Members
// expire on a one-second tick. Each connection may make a burst of 20 calls, then 5 a second
// (RateLimit); beyond, a call fails with "refused: too many calls" and the first such refusal is
// logged once.
#pragma once

#include <functional>
#include <string>

#include "libs/tracker/membership.h"

namespace ravnest::tracker {

struct TrackerOptions {
  std::string listen;        // host:port (port 0: a free one)
  std::string state_dir;     // created if missing
  std::string secret_file;   // empty: no secret (every client trusted)
  bool insecure = false;     // plain TCP (benchmarks only)
  Bounds bounds;
  size_t max_connections = 4096;
  size_t max_connections_per_host = 64;
  std::string log_level = "info";
  std::string offer_relay;   // host:port to relay on for daemons behind NAT; empty: none
};

// Serves until SIGTERM or SIGINT (returns 0). `on_listening(port)`, if set, is called once the
// port is open. Throws std::exception with a one-line reason when it cannot start (bad listen
// address, port taken, unreadable secret or state file, bad bounds, a relay it cannot open).
int run_tracker(const TrackerOptions& options,
                const std::function<void(unsigned)>& on_listening = {});

}  // namespace ravnest::tracker
