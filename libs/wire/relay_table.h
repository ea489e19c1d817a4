// RelayTable: what a relay (relay.h) decides, as plain data: which nodes behind NAT hold a port
// on it, the sessions peers opened to them, and the bounds on both; and the relay's few lines of
// protocol, written and parsed here. No I/O, no clock of its own (the caller passes `now`, steady
// seconds), usable from one thread at a time.
//
// The protocol (docs/relay.md): every line ends with '\n' and is at most kRelayLineBytes long.
//   node -> relay, its control connection:  "ravnest-relay 1 control PORT"  (0: any free port)
//   relay -> node:                           "ok PORT" or "refused: WHY", then "open SESSION
//                                             PEER NONCE" for each peer (its host:port) that
//                                             connected to PORT (NONCE: 32 fresh bytes, hex)
//   node -> relay, a fresh connection:       "ravnest-relay 1 join SESSION PROOF" (PROOF: the
//                                             join's proof of the secret, below); relay -> node:
//                                             "joined" or "refused: WHY"; then the bytes of
//                                             the session (the node's TLS, its gate, its Cap'n
//                                             Proto or a data channel), spliced to the peer's.
// A peer dials the node's port on the relay as it would dial the node: it sends nothing of this
// protocol, so every dial site stays what it is (TURN's relayed address, RFC 8656).
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ravnest::wire {

inline constexpr size_t kRelayLineBytes = 160;  // a proof line: 6 + 64 + 1 + 64 bytes

struct RelayLimits {
  size_t max_nodes = 64;              // ports held in all
  size_t max_nodes_per_host = 4;      // ports held by control connections from one host
  size_t max_sessions_per_node = 64;  // sessions open (pending or spliced) to one node
  size_t max_sessions_per_peer = 32;  // sessions opened from one peer host, to all nodes
  double join_seconds = 10;           // a node that does not join a session in this long loses it
  double idle_seconds = 600;          // a spliced session with no byte either way this long ends
};

// ---- lines -------------------------------------------------------------------------------------

using RelayNonce = std::array<uint8_t, 32>;

struct RelayHello {
  enum class Kind { kControl, kJoin } kind = Kind::kControl;
  uint16_t port = 0;     // kControl: the port asked for
  uint64_t session = 0;  // kJoin
  RelayNonce proof{};    // kJoin
};
std::string control_hello(uint16_t port);
std::string join_hello(uint64_t session, const RelayNonce& proof);
std::string open_line(uint64_t session, const std::string& peer, const RelayNonce& nonce);
inline constexpr const char* kJoinedLine = "joined\n";
std::string allocated_line(uint16_t port);
// Each takes a line without its '\n'; nullopt with `why` set (a short phrase quoting the line,
// made printable) when the line is not what it should be.
std::optional<RelayHello> parse_relay_hello(const std::string& line, std::string& why);
struct OpenLine {
  uint64_t session = 0;
  std::string peer;  // host:port as the relay saw it
  RelayNonce nonce{};
};
std::optional<OpenLine> parse_open_line(const std::string& line, std::string& why);
// "ok PORT" gives PORT; "refused: WHY" sets `why` to the whole line and gives nullopt.
std::optional<uint16_t> parse_allocated_line(const std::string& line, std::string& why);

// The secret's gate on a control connection (docs/relay.md): the relay answers a control hello
// with "challenge NONCE" (its fresh 32 bytes, hex), the node with "proof CLIENT_NONCE PROOF" where
// PROOF = NodeCredentials::gate_proof(kClient, NONCE, CLIENT_NONCE): the daemons' own gate's
// HMAC-SHA-256 over both nonces, so the secret never travels and a proof is never replayed.
// A join proves the secret too, without a round trip: its PROOF is gate_proof(kClient, NONCE,
// NONCE) over the session's NONCE, which only the node's control connection was told (after its
// own proof), and a session is joined once: a device behind the node's router, which shares its
// host, cannot take the node's sessions (relay.h's join_proof).
std::string challenge_line(const RelayNonce& nonce);
std::string proof_line(const RelayNonce& client_nonce, const RelayNonce& proof);
std::optional<RelayNonce> parse_challenge_line(const std::string& line, std::string& why);
struct ProofLine {
  RelayNonce client_nonce{};
  RelayNonce proof{};
};
std::optional<ProofLine> parse_proof_line(const std::string& line, std::string& why);

// ---- the table ---------------------------------------------------------------------------------

class RelayTable {
 public:
  explicit RelayTable(RelayLimits limits = {}) : limits_(limits) {}

  // "" when a control connection from `host` may hold one more port, else the refusal line
  // ("refused: ..."). Asked before the port is bound.
  std::string may_hold(const std::string& host) const;
  // The port bound for `host` (after may_hold said yes).
  void hold(uint16_t port, const std::string& host);
  // The node's control connection ended: its port and every session to it go. The sessions'
  // ids, for the caller to close.
  std::vector<uint64_t> release(uint16_t port);

  struct Opened {
    uint64_t session = 0;  // 0: refused
    std::string refusal;   // "refused: ..." when session is 0
  };
  // A peer from `peer_host` connected to `port`: a new pending session, or why not.
  Opened open(uint16_t port, const std::string& peer_host, double now);
  // The node joined `session` from `host`: "" when that session waits for it, else the refusal
  // (unknown, expired, already joined, joined from another host than the node's control).
  std::string join(uint64_t session, const std::string& host);
  // A session ended (either side closed, an error, idle).
  void end(uint64_t session);
  // Pending sessions older than join_seconds, removed; their ids.
  std::vector<uint64_t> expire(double now);

  size_t nodes() const { return nodes_.size(); }
  size_t sessions() const { return sessions_.size(); }
  std::optional<uint16_t> port_of(uint64_t session) const;
  const RelayLimits& limits() const { return limits_; }

 private:
  struct Node {
    std::string host;
    size_t sessions = 0;
  };
  struct Session {
    uint16_t port = 0;
    std::string peer_host;
    double opened_at = 0;
    bool joined = false;
  };
  RelayLimits limits_;
  std::map<uint16_t, Node> nodes_;
  std::map<uint64_t, Session> sessions_;
  std::map<std::string, size_t> sessions_per_peer_;
  uint64_t next_session_ = 1;
};

}  // namespace ravnest::wire
