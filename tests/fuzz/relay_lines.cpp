// Fuzz target: what a relay and a node behind it read from each other before the splice
// (libs/wire/relay_table.h): the hello, open, answer, challenge and proof lines, which come from
// anyone who connects (the relay's port is public) or from a relay the node does not control;
// and the RelayTable's bounds under any sequence of holds, opens, joins, ends, expiries and
// releases.
//
// Input: a first byte below 128: lines ('\n' between), each given to every parser as
// read_relay_line hands lines out (at most kRelayLineBytes); one that is accepted must be written
// back by its writer to the same value within that length, and every refusal is one line.
// Otherwise: operations on a table with small bounds, 4 bytes each (operation, then three
// arguments), after each of which the bounds must hold.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "libs/wire/relay_table.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::wire;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "relay: %s\n", what);
  std::abort();
}

void check_why(const std::string& why) {
  if (why.empty()) broken("a refusal without a reason");
  if (why.size() > 4 * kRelayLineBytes) broken("a refusal longer than a few lines' worth");
  ravnest::fuzz::check_one_line(why.c_str());
}

std::string without_newline(const std::string& line) {
  if (line.empty() || line.back() != '\n') broken("a line written without its newline");
  // read_relay_line takes kRelayLineBytes before the newline.
  if (line.size() > kRelayLineBytes + 1) broken("a line written longer than a reader takes");
  return line.substr(0, line.size() - 1);
}

void parse_everything(const std::string& line) {
  std::string why;
  if (auto hello = parse_relay_hello(line, why)) {
    const std::string again = hello->kind == RelayHello::Kind::kControl
                                  ? control_hello(hello->port)
                                  : join_hello(hello->session, hello->proof);
    std::string why2;
    auto back = parse_relay_hello(without_newline(again), why2);
    if (!back || back->kind != hello->kind || back->port != hello->port ||
        back->session != hello->session || back->proof != hello->proof) {
      broken("a hello that does not read back");
    }
  } else {
    check_why(why);
  }
  why.clear();
  if (auto open = parse_open_line(line, why)) {
    std::string why2;
    auto back = parse_open_line(without_newline(open_line(open->session, open->peer, open->nonce)),
                                why2);
    if (!back || back->session != open->session || back->peer != open->peer ||
        back->nonce != open->nonce) {
      broken("an open line that does not read back");
    }
  } else {
    check_why(why);
  }
  why.clear();
  if (auto port = parse_allocated_line(line, why)) {
    std::string why2;
    if (parse_allocated_line(without_newline(allocated_line(*port)), why2) != port) {
      broken("an answer that does not read back");
    }
  } else {
    check_why(why);
  }
  why.clear();
  if (auto nonce = parse_challenge_line(line, why)) {
    std::string why2;
    if (parse_challenge_line(without_newline(challenge_line(*nonce)), why2) != nonce) {
      broken("a challenge that does not read back");
    }
  } else {
    check_why(why);
  }
  why.clear();
  if (auto proof = parse_proof_line(line, why)) {
    std::string why2;
    auto back = parse_proof_line(without_newline(proof_line(proof->client_nonce, proof->proof)),
                                 why2);
    if (!back || back->client_nonce != proof->client_nonce || back->proof != proof->proof) {
      broken("a proof that does not read back");
    }
  } else {
    check_why(why);
  }
}

void run_table(const uint8_t* data, size_t size) {
  RelayLimits limits;
  limits.max_nodes = 3;
  limits.max_nodes_per_host = 2;
  limits.max_sessions_per_node = 3;
  limits.max_sessions_per_peer = 4;
  limits.join_seconds = 10;
  RelayTable table(limits);
  std::set<uint64_t> live;    // sessions the table said it opened and did not end
  std::set<uint16_t> held;    // ports held: a relay holds a port only once it bound it, so never
                              // one held already (hold()'s precondition)
  const std::string hosts[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "[::1]"};
  for (size_t at = 0; at + 4 <= size; at += 4) {
    const uint8_t op = data[at] % 6;
    const uint16_t port = static_cast<uint16_t>(9000 + data[at + 1] % 6);
    const std::string& host = hosts[data[at + 2] % 4];
    const uint64_t session = data[at + 3] % 16;
    const double now = data[at + 3];
    switch (op) {
      case 0:
        if (held.count(port) == 0) {
          const std::string refusal = table.may_hold(host);
          if (refusal.empty()) {
            table.hold(port, host);
            held.insert(port);
          } else {
            check_why(refusal);
          }
        }
        break;
      case 1: {
        const auto opened = table.open(port, host, now);
        if (opened.session != 0) {
          if (!live.insert(opened.session).second) broken("a session number given twice");
        } else {
          check_why(opened.refusal);
        }
        break;
      }
      case 2: {
        const std::string refusal = table.join(session, host);
        if (!refusal.empty()) check_why(refusal);
        break;
      }
      case 3:
        table.end(session);
        live.erase(session);
        break;
      case 4:
        for (uint64_t gone : table.expire(now)) live.erase(gone);
        break;
      case 5:
        for (uint64_t gone : table.release(port)) live.erase(gone);
        held.erase(port);
        break;
    }
    if (table.nodes() > limits.max_nodes) broken("more nodes than the bound");
    if (table.nodes() != held.size()) broken("the table lost count of its nodes");
    if (table.sessions() > limits.max_nodes * limits.max_sessions_per_node) {
      broken("more sessions than the nodes may have");
    }
    if (table.sessions() != live.size()) broken("the table lost count of its sessions");
    for (uint64_t id : live) {
      if (!table.port_of(id)) broken("a live session without its port");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] < 128) {
    const std::string text = ravnest::fuzz::text_of(data + 1, size - 1);
    size_t start = 0;
    while (start <= text.size()) {
      const size_t end = text.find('\n', start);
      const std::string line =
          text.substr(start, end == std::string::npos ? std::string::npos : end - start);
      // What read_relay_line hands out: at most kRelayLineBytes before the newline.
      if (line.size() <= kRelayLineBytes) parse_everything(line);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return 0;
  }
  run_table(data + 1, size - 1);
  return 0;
}
