// Relay: reaching a daemon behind NAT (docs/relay.md). A node that cannot accept connections
// keeps one control connection to a relay (RelayLink, relay_link.h, on the node); the relay opens
// a port of its own for it (the node's relayed address, as TURN allocates one: RFC 8656); a peer
// dials that port exactly as it would dial the node; the relay tells the node "open SESSION"
// over its control connection, the node opens a fresh connection to the relay ("join SESSION
// PROOF", proving the secret over the session's nonce),
// and the relay splices the two byte streams. The relay never reads what it splices: the peer's
// TLS, the gate's proofs of the secret, Cap'n Proto and a ring's sealed data channel run end to
// end, so the relay sees ciphertext and a byte it alters fails the TLS record (or the data
// channel's AES-GCM tag) at the node or the peer.
//
// Bounds (RelayTable, relay_table.h): ports held in all and per host, sessions per node and per
// peer host, a node that does not join in time, a spliced session idle too long, a hello line
// longer than kRelayLineBytes or not sent in time. A control connection proves it knows the secret
// before it holds a port (Options::credentials): a stranger cannot take the ports of the nodes. A line that is not the protocol is answered
// "refused: WHY" and closed, and reported once through on_event (a burst of 20 lines, then 2 a
// second, the ones left out counted in the next: line_budget.h); the relay serves on.
//
// Runs on the calling thread's KJ event loop (thread_io.h): create, use and destroy it there.
// The constructor listens (throws kj::Exception when it cannot); nothing else blocks.
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "libs/wire/line_budget.h"
#include "libs/wire/node_credentials.h"
#include "libs/wire/relay_table.h"
#include "libs/wire/thread_io.h"

namespace ravnest::wire {

class Relay : private kj::TaskSet::ErrorHandler {
 public:
  struct Options {
    RelayLimits limits;
    kj::Duration hello_timeout = 10 * kj::SECONDS;
    // One line for each thing the relay did or refused ("relay: ..."). Unset: silent.
    std::function<void(const std::string&)> on_event;
    // For the tests that show a relay cannot alter what it carries unnoticed: what it does to
    // every session's stream towards the node, from the byte at `at` (1-based; 0: nothing).
    // stall: from byte `at` towards the node on, the session forwards nothing more, either way,
    // and reads nothing more, both connections held open (one session of a relay frozen by
    // SIGSTOP); only the idle bound (limits.idle_seconds) ends it.
    struct Tamper {
      enum class Kind { flip, drop, stall };
      Kind kind = Kind::flip;
      uint64_t at = 0;
      uint64_t count = 1;  // drop: how many bytes, from `at`, are never forwarded
    };
    Tamper tamper;
    // The secret's credentials: a control connection then holds a port only after proving it
    // knows the secret (the challenge of relay_table.h; `refused: wrong secret` otherwise).
    // Null: no proof asked (tests of the splice alone).
    std::shared_ptr<const NodeCredentials> credentials;
  };

  // Listens for nodes' control and join connections on host:port (0: a free port, see port());
  // the ports it opens for nodes are on `host` too.
  Relay(const std::string& host, uint16_t port, Options options);
  ~Relay() noexcept(false);

  uint16_t port() const { return port_; }
  const RelayTable& table() const { return table_; }

  // A join's proof of the secret over its session's nonce (relay_table.h): what the node sends
  // and the relay expects.
  static RelayNonce join_proof(const NodeCredentials& credentials, const RelayNonce& nonce) {
    return credentials.gate_proof(GateSide::kClient, nonce, nonce);
  }

 private:
  struct Held;
  struct Splice;
  kj::Promise<void> accept_loop();
  kj::Promise<void> greet(kj::Own<kj::AsyncIoStream> stream);
  kj::Promise<void> challenge(kj::Own<kj::AsyncIoStream> control, const std::string& peer,
                              uint16_t asked);
  kj::Promise<void> hold(kj::Own<kj::AsyncIoStream> control, const std::string& host,
                         uint16_t asked);
  kj::Promise<void> serve_held(kj::Own<kj::AsyncIoStream> control, const std::string& host,
                               kj::Own<kj::ConnectionReceiver> listener);
  kj::Promise<void> accept_peers(Held& held);
  void peer_arrived(Held& held, kj::Own<kj::AsyncIoStream> peer);
  kj::Promise<void> join(kj::Own<kj::AsyncIoStream> node, const std::string& host,
                         uint64_t session, const RelayNonce& proof);
  kj::Promise<void> splice(uint64_t session, kj::Own<kj::AsyncIoStream> peer,
                           kj::Own<kj::AsyncIoStream> node);
  kj::Promise<void> refuse(kj::Own<kj::AsyncIoStream> stream, const std::string& peer,
                           const std::string& refusal);
  void say(const std::string& line);
  double now() const;
  void taskFailed(kj::Exception&& exception) override;

  kj::Own<ThreadIo> io_;  // first: the event loop outlives everything below
  std::string host_;
  Options options_;
  RelayTable table_;
  LineBudget log_budget_{20, 2};  // say()'s lines: a burst of 20, then 2 a second
  uint16_t port_ = 0;
  kj::Own<kj::ConnectionReceiver> listener_;
  std::map<uint16_t, kj::Own<Held>> held_;                       // by relayed port
  struct Pending {
    kj::Own<kj::AsyncIoStream> peer;
    RelayNonce nonce;  // told to the node in the open line; its join proves the secret over it
  };
  std::map<uint64_t, Pending> pending_;  // peers waiting for a join
  kj::TaskSet tasks_;  // last: destroyed first
};

// Reads one line ending in '\n' (returned without it), at most kRelayLineBytes, a byte at a time
// so that nothing after it is consumed; rejects on a longer line or an end before '\n'.
kj::Promise<std::string> read_relay_line(kj::AsyncIoStream& stream);

}  // namespace ravnest::wire
