// Fuzz target: a relay's table (libs/wire/relay_table.h's RelayTable) under any sequence of what
// its connections can make it do: nodes holding and releasing ports, peers opening sessions to
// them, nodes joining sessions (or strangers trying to), sessions ending and expiring, as
// libs/wire/relay.cpp calls it. Small limits, so that inputs reach them.
//
// Input: a sequence of operations, two bytes each (Op below, modulo their number, and its
// argument). A refusal is one line "refused: ..."; what must hold after every operation: the
// ports held, the sessions of each node and of each peer host stay within the limits (the
// relay's memory is bounded whoever connects), a session belongs to a held port, a port released
// takes its sessions with it, and a pending session older than join_seconds is expired.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "libs/wire/relay_table.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::wire;

namespace {

enum Op : uint8_t {
  kHold,     // a node's control connection from host ARG % 4 holds a free port
  kRelease,  // the control connection of held port ARG ends
  kOpen,     // a peer from host ARG % 4 dials port ARG / 4 % 8 (held or not)
  kJoin,     // session ARG % 16 + 1 joined from host ARG / 16 % 4
  kEnd,      // session ARG % 16 + 1 ends
  kTick,     // ARG / 16 seconds pass, then expire
  kOpCount
};

RelayLimits limits() {
  RelayLimits l;
  l.max_nodes = 5;
  l.max_nodes_per_host = 2;
  l.max_sessions_per_node = 3;
  l.max_sessions_per_peer = 4;
  l.join_seconds = 10;
  return l;
}

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "the relay's table breaks: %s\n", what);
  std::abort();
}

std::string host(unsigned i) { return "10.0.0." + std::to_string(i % 4); }

void check_refusal(const std::string& refusal) {
  if (refusal.rfind("refused: ", 0) != 0) broken("a refusal without \"refused: \"");
  ravnest::fuzz::check_one_line(refusal.c_str());
}

// What the harness knows of the table, to check it against.
struct Model {
  std::map<uint16_t, std::string> held;  // port -> host of its control connection
  struct Session {
    uint16_t port;
    std::string peer_host;
    double opened_at;
    bool joined;
  };
  std::map<uint64_t, Session> sessions;
  uint16_t next_port = 40000;  // as a listener's fresh port
  double now = 0;
};

void check(const RelayTable& table, const Model& model) {
  const RelayLimits l = limits();
  if (table.nodes() != model.held.size()) broken("ports held");
  if (table.nodes() > l.max_nodes) broken("more ports held than max_nodes");
  if (table.sessions() != model.sessions.size()) broken("sessions open");
  std::map<std::string, size_t> of_host;
  for (const auto& [port, h] : model.held) {
    if (++of_host[h] > l.max_nodes_per_host) broken("more ports of a host than max_nodes_per_host");
  }
  std::map<uint16_t, size_t> of_node;
  std::map<std::string, size_t> of_peer;
  for (const auto& [id, s] : model.sessions) {
    if (table.port_of(id) != s.port) broken("a session's port");
    if (!model.held.count(s.port)) broken("a session to a port no node holds");
    if (++of_node[s.port] > l.max_sessions_per_node) broken("more sessions of a node than allowed");
    if (++of_peer[s.peer_host] > l.max_sessions_per_peer) broken("more sessions of a peer host");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RelayTable table(limits());
  Model model;
  for (size_t i = 0; i + 1 < size; i += 2) {
    const uint8_t arg = data[i + 1];
    switch (static_cast<Op>(data[i] % kOpCount)) {
      case kHold: {
        const std::string h = host(arg);
        const std::string refusal = table.may_hold(h);
        if (!refusal.empty()) {
          check_refusal(refusal);
          break;
        }
        const uint16_t port = model.next_port++;
        table.hold(port, h);
        model.held[port] = h;
        break;
      }
      case kRelease: {
        if (model.held.empty()) break;
        auto it = model.held.begin();
        std::advance(it, arg % model.held.size());
        const uint16_t port = it->first;
        const auto ended = table.release(port);
        std::set<uint64_t> expected;
        for (const auto& [id, s] : model.sessions) {
          if (s.port == port) expected.insert(id);
        }
        if (std::set<uint64_t>(ended.begin(), ended.end()) != expected) {
          broken("a released port's sessions");
        }
        for (uint64_t id : ended) model.sessions.erase(id);
        model.held.erase(it);
        break;
      }
      case kOpen: {
        const uint16_t port = static_cast<uint16_t>(40000 + arg / 4 % 8);
        const std::string peer = host(arg);
        const auto opened = table.open(port, peer, model.now);
        if (opened.session == 0) {
          check_refusal(opened.refusal);
          break;
        }
        if (model.sessions.count(opened.session)) broken("a session id given twice");
        model.sessions[opened.session] = {port, peer, model.now, false};
        break;
      }
      case kJoin: {
        const uint64_t id = arg % 16 + 1;
        const std::string h = host(arg / 16);
        const std::string refusal = table.join(id, h);
        const auto s = model.sessions.find(id);
        const bool may = s != model.sessions.end() && !s->second.joined &&
                         model.held.at(s->second.port) == h;
        if (refusal.empty() != may) broken("a join let in or refused wrongly");
        if (!refusal.empty()) {
          check_refusal(refusal);
          break;
        }
        s->second.joined = true;
        break;
      }
      case kEnd: {
        const uint64_t id = arg % 16 + 1;
        table.end(id);
        model.sessions.erase(id);
        break;
      }
      case kTick: {
        model.now += arg / 16;
        const auto expired = table.expire(model.now);
        std::set<uint64_t> expected;
        for (const auto& [id, s] : model.sessions) {
          if (!s.joined && model.now - s.opened_at >= limits().join_seconds) expected.insert(id);
        }
        if (std::set<uint64_t>(expired.begin(), expired.end()) != expected) {
          broken("the sessions expired");
        }
        for (uint64_t id : expired) model.sessions.erase(id);
        break;
      }
      case kOpCount: break;
    }
    check(table, model);
  }
  return 0;
}
