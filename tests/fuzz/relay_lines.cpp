// Fuzz target: the relay's lines (libs/wire/relay_table.h), parsed as the relay parses what a
// connection says first (parse_relay_hello) and a control connection's proof (parse_proof_line),
// and as a node's RelayLink parses the relay's answers (parse_challenge_line,
// parse_allocated_line, parse_open_line). read_relay_line hands each a line without its '\n' of
// at most kRelayLineBytes; here they take any bytes, of any length.
//
// Input: one byte choosing the parser (Line below, modulo their number), then the line.
//
// A refused line gives nullopt and `why`: one line of printable ASCII, short enough for a log
// line (the relay logs it and sends it back as "refused: WHY"). An accepted line's value, written
// again by its writer (control_hello, open_line, ...), parses to the same value. Anything else
// (an exception, a crash) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "libs/wire/relay_table.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::wire;

namespace {

// The lines, by the first byte of the input (the seeds in tests/fuzz/relay_lines/ start with it).
enum Line : uint8_t {
  kHello,      // node or peer -> relay: "ravnest-relay 1 control PORT" / "... join SESSION PROOF"
  kProof,      // node -> relay: "proof CLIENT_NONCE PROOF"
  kChallenge,  // relay -> node: "challenge NONCE"
  kAllocated,  // relay -> node: "ok PORT" / "refused: WHY"
  kOpen,       // relay -> node: "open SESSION PEER NONCE"
  kLineCount
};

// A relay line, each byte escaped to \xNN, and the phrase before it: the relay's refusal
// (parse_allocated_line) is shown whole, the other lines' first 64 bytes.
constexpr size_t kMaxWhyBytes = 4 * kRelayLineBytes + 64;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "a relay line breaks: %s\n", what);
  std::abort();
}

std::string without_newline(const std::string& line) {
  if (line.empty() || line.back() != '\n') broken("a written line without its '\\n'");
  return line.substr(0, line.size() - 1);
}

void check_why(const std::string& why) {
  if (why.empty()) broken("a refusal without a reason");
  if (why.size() > kMaxWhyBytes) broken("a reason longer than a log line");
  for (unsigned char c : why) {
    if (c < 0x20 || c > 0x7e) broken("a reason with a byte that is not printable ASCII");
  }
}

template <typename T>
bool refused(const std::optional<T>& value, const std::string& why) {
  if (value) return false;
  check_why(why);
  return true;
}

void parse(Line which, const std::string& line) {
  std::string why;
  switch (which) {
    case kHello: {
      const auto hello = parse_relay_hello(line, why);
      if (refused(hello, why)) return;
      std::string again_why;
      const auto again = parse_relay_hello(
          without_newline(hello->kind == RelayHello::Kind::kControl ? control_hello(hello->port)
                                                                    : join_hello(hello->session,
                                                                                 hello->proof)),
          again_why);
      if (!again || again->kind != hello->kind || again->port != hello->port ||
          again->session != hello->session || again->proof != hello->proof) {
        broken("a hello's round trip");
      }
      if (hello->kind == RelayHello::Kind::kJoin && hello->session == 0) broken("session 0");
      return;
    }
    case kProof: {
      const auto proof = parse_proof_line(line, why);
      if (refused(proof, why)) return;
      const auto again =
          parse_proof_line(without_newline(proof_line(proof->client_nonce, proof->proof)), why);
      if (!again || again->client_nonce != proof->client_nonce || again->proof != proof->proof) {
        broken("a proof's round trip");
      }
      return;
    }
    case kChallenge: {
      const auto nonce = parse_challenge_line(line, why);
      if (refused(nonce, why)) return;
      if (parse_challenge_line(without_newline(challenge_line(*nonce)), why) != nonce) {
        broken("a challenge's round trip");
      }
      return;
    }
    case kAllocated: {
      const auto port = parse_allocated_line(line, why);
      if (refused(port, why)) return;
      if (*port == 0) broken("port 0 held");
      if (parse_allocated_line(without_newline(allocated_line(*port)), why) != port) {
        broken("an allocation's round trip");
      }
      return;
    }
    case kOpen: {
      const auto open = parse_open_line(line, why);
      if (refused(open, why)) return;
      if (open->session == 0) broken("session 0");
      const auto again = parse_open_line(
          without_newline(open_line(open->session, open->peer, open->nonce)), why);
      if (!again || again->session != open->session || again->peer != open->peer ||
          again->nonce != open->nonce) {
        broken("an open line's round trip");
      }
      return;
    }
    case kLineCount: return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  parse(static_cast<Line>(data[0] % kLineCount), ravnest::fuzz::text_of(data + 1, size - 1));
  return 0;
}
