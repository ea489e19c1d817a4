#include "libs/wire/relay_table.h"

#include <charconv>

#include "libs/base/address.h"
#include "libs/base/printable.h"

namespace ravnest::wire {
namespace {

constexpr const char* kHelloPrefix = "ravnest-relay 1 ";

template <typename T>
std::optional<T> decimal(const std::string& text) {
  T value{};
  if (text.empty() || text.size() > 20) return std::nullopt;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || p != end) return std::nullopt;
  return value;
}

std::string quoted(const std::string& line) { return "\"" + base::printable_quoted(line, 64) + "\""; }

std::string hex_of(const RelayNonce& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

std::optional<RelayNonce> bytes_of(const std::string& hex) {
  if (hex.size() != 64) return std::nullopt;
  RelayNonce bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto [p, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, bytes[i], 16);
    if (ec != std::errc() || p != hex.data() + 2 * i + 2) return std::nullopt;
  }
  return bytes;
}

}  // namespace

std::string control_hello(uint16_t port) {
  return std::string(kHelloPrefix) + "control " + std::to_string(port) + "\n";
}
std::string join_hello(uint64_t session, const RelayNonce& proof) {
  return std::string(kHelloPrefix) + "join " + std::to_string(session) + " " + hex_of(proof) +
         "\n";
}
std::string open_line(uint64_t session, const std::string& peer, const RelayNonce& nonce) {
  return "open " + std::to_string(session) + " " + peer + " " + hex_of(nonce) + "\n";
}
std::string allocated_line(uint16_t port) { return "ok " + std::to_string(port) + "\n"; }

std::optional<RelayHello> parse_relay_hello(const std::string& line, std::string& why) {
  const std::string prefix = kHelloPrefix;
  if (line.compare(0, prefix.size(), prefix) != 0) {
    why = "not a relay hello: " + quoted(line);
    return std::nullopt;
  }
  const std::string rest = line.substr(prefix.size());
  RelayHello hello;
  if (rest.rfind("control ", 0) == 0) {
    auto port = decimal<uint16_t>(rest.substr(8));
    if (!port) {
      why = "a control hello without a port 0-65535: " + quoted(line);
      return std::nullopt;
    }
    hello.kind = RelayHello::Kind::kControl;
    hello.port = *port;
    return hello;
  }
  if (rest.rfind("join ", 0) == 0) {
    const size_t space = rest.find(' ', 5);
    auto session = decimal<uint64_t>(rest.substr(5, space == std::string::npos ? std::string::npos
                                                                               : space - 5));
    auto proof = space == std::string::npos ? std::nullopt : bytes_of(rest.substr(space + 1));
    if (!session || *session == 0 || !proof) {
      why = "a join without a session number and a proof: " + quoted(line);
      return std::nullopt;
    }
    hello.kind = RelayHello::Kind::kJoin;
    hello.session = *session;
    hello.proof = *proof;
    return hello;
  }
  why = "neither control nor join: " + quoted(line);
  return std::nullopt;
}

std::optional<OpenLine> parse_open_line(const std::string& line, std::string& why) {
  const size_t space = line.find(' ', 5);
  const size_t last = line.rfind(' ');
  if (line.rfind("open ", 0) == 0 && space != std::string::npos && last > space) {
    auto session = decimal<uint64_t>(line.substr(5, space - 5));
    auto peer = base::Address::try_parse(line.substr(space + 1, last - space - 1));
    auto nonce = bytes_of(line.substr(last + 1));
    if (session && *session != 0 && peer && nonce) return OpenLine{*session, peer->str(), *nonce};
  }
  why = "not an open line: " + quoted(line);
  return std::nullopt;
}

std::optional<uint16_t> parse_allocated_line(const std::string& line, std::string& why) {
  if (line.rfind("ok ", 0) == 0) {
    auto port = decimal<uint16_t>(line.substr(3));
    if (port && *port != 0) return port;
  }
  why = line.rfind("refused: ", 0) == 0 ? base::printable(line, kRelayLineBytes)
                                         : "not an answer of a relay: " + quoted(line);
  return std::nullopt;
}

std::string RelayTable::may_hold(const std::string& host) const {
  if (nodes_.size() >= limits_.max_nodes) {
    return "refused: the relay holds " + std::to_string(nodes_.size()) + " nodes (at most " +
           std::to_string(limits_.max_nodes) + ")";
  }
  size_t of_host = 0;
  for (const auto& [port, node] : nodes_) of_host += node.host == host ? 1 : 0;
  if (of_host >= limits_.max_nodes_per_host) {
    return "refused: " + std::to_string(of_host) + " nodes relayed for " + host +
           " already (at most " + std::to_string(limits_.max_nodes_per_host) + " a host)";
  }
  return "";
}

void RelayTable::hold(uint16_t port, const std::string& host) { nodes_[port] = Node{host, 0}; }

std::vector<uint64_t> RelayTable::release(uint16_t port) {
  std::vector<uint64_t> ended;
  for (const auto& [id, session] : sessions_) {
    if (session.port == port) ended.push_back(id);
  }
  for (uint64_t id : ended) end(id);
  nodes_.erase(port);
  return ended;
}

RelayTable::Opened RelayTable::open(uint16_t port, const std::string& peer_host, double now) {
  auto node = nodes_.find(port);
  if (node == nodes_.end()) return {0, "refused: no node holds port " + std::to_string(port)};
  if (node->second.sessions >= limits_.max_sessions_per_node) {
    return {0, "refused: " + std::to_string(node->second.sessions) +
                   " sessions open to the node at port " + std::to_string(port) + " (at most " +
                   std::to_string(limits_.max_sessions_per_node) + ")"};
  }
  size_t& of_peer = sessions_per_peer_[peer_host];
  if (of_peer >= limits_.max_sessions_per_peer) {
    return {0, "refused: " + std::to_string(of_peer) + " sessions open from " + peer_host +
                   " (at most " + std::to_string(limits_.max_sessions_per_peer) + ")"};
  }
  ++of_peer;
  ++node->second.sessions;
  const uint64_t id = next_session_++;
  sessions_[id] = Session{port, peer_host, now, false};
  return {id, ""};
}

std::string RelayTable::join(uint64_t session, const std::string& host) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    return "refused: no session " + std::to_string(session) + " waits (ended, or never opened)";
  }
  if (it->second.joined) return "refused: session " + std::to_string(session) + " joined already";
  const auto node = nodes_.find(it->second.port);
  if (node == nodes_.end() || node->second.host != host) {
    return "refused: session " + std::to_string(session) + " joined from " + host +
           ", not from its node's host";
  }
  it->second.joined = true;
  return "";
}

void RelayTable::end(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  auto node = nodes_.find(it->second.port);
  if (node != nodes_.end() && node->second.sessions > 0) --node->second.sessions;
  auto peer = sessions_per_peer_.find(it->second.peer_host);
  if (peer != sessions_per_peer_.end() && --peer->second == 0) sessions_per_peer_.erase(peer);
  sessions_.erase(it);
}

std::vector<uint64_t> RelayTable::expire(double now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, session] : sessions_) {
    if (!session.joined && now - session.opened_at >= limits_.join_seconds) expired.push_back(id);
  }
  for (uint64_t id : expired) end(id);
  return expired;
}

std::optional<uint16_t> RelayTable::port_of(uint64_t session) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.port;
}

std::string challenge_line(const RelayNonce& nonce) { return "challenge " + hex_of(nonce) + "\n"; }

std::string proof_line(const RelayNonce& client_nonce, const RelayNonce& proof) {
  return "proof " + hex_of(client_nonce) + " " + hex_of(proof) + "\n";
}

std::optional<RelayNonce> parse_challenge_line(const std::string& line, std::string& why) {
  if (line.rfind("challenge ", 0) == 0) {
    if (auto nonce = bytes_of(line.substr(10))) return nonce;
  }
  why = "not a challenge line: " + quoted(line);
  return std::nullopt;
}

std::optional<ProofLine> parse_proof_line(const std::string& line, std::string& why) {
  if (line.rfind("proof ", 0) == 0 && line.size() == 6 + 64 + 1 + 64 && line[70] == ' ') {
    auto nonce = bytes_of(line.substr(6, 64));
    auto proof = bytes_of(line.substr(71));
    if (nonce && proof) return ProofLine{*nonce, *proof};
  }
  why = "not a proof line: " + quoted(line);
  return std::nullopt;
}

}  // namespace ravnest::wire
