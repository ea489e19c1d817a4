// Fuzz target: the bytes a peer sends on a connection, as the daemon's connection reader sees
// them (libs/wire/guarded_stream.h) with Cap'n Proto's message reader on top, as an RPC
// connection reads: messages are read one after the other until the stream ends or GuardedStream
// (or capnp) refuses one.
//
// Input: one byte choosing the connection's state and limits, then the bytes sent:
//   bit 0: the connection is open (its gate opened); else the limits before authentication
//   bit 1: once open, limits by kind (Node.pushStage 64 KiB, any other message 4 KiB); else one
//          limit of 8 KiB for every message
// Checked beyond "no crash, no hang, no unbounded allocation": every message handed to capnp is
// within the limit that applies to it (by its kind, read independently with rpc_message_kind),
// and before the gate opens no more than the budget is ever handed over.
#include <capnp/serialize-async.h>
#include <kj/async.h>
#include <kj/async-io.h>
#include <kj/exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "libs/wire/guarded_stream.h"

using namespace ravnest::wire;

namespace {

constexpr uint64_t kOtherLimit = 4096;
constexpr uint64_t kCallLimit = 65536;
constexpr uint64_t kFlatLimit = 8192;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "guarded_stream: %s\n", what.c_str());
  std::abort();
}

// The message's size as framed: segments and header.
uint64_t message_bytes(capnp::MessageReader& message) {
  uint64_t words = 0;
  uint32_t count = 0;
  // A MessageReader does not say how many segments it has: ask until one is empty (an empty
  // segment in the middle counts the message short, which can hide a finding but not make one).
  for (uint32_t i = 0; i < 512; ++i) {
    auto segment = message.getSegment(i);
    if (segment == nullptr) break;
    words += segment.size();
    ++count;
  }
  // The frame header: a word of count and first size, then 4 bytes per further segment, padded.
  const uint64_t header = 8 * ((count + 2) / 2);
  return header + words * 8;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static kj::EventLoop loop;
  static kj::WaitScope wait_scope(loop);
  const uint8_t mode = data[0];
  const bool opened = mode & 1;
  const bool by_kind = mode & 2;
  ++data;
  --size;

  MessageLimits limits;
  if (by_kind) {
    // Any interface id and method: the kinds are what the limit code keys on.
    limits.calls[{0xa0b1c2d3e4f50617ull, 3}] = CallLimit{"Node.pushStage", kCallLimit};
    limits.other_message_bytes = kOtherLimit;
  } else {
    limits.message_bytes = kFlatLimit;
  }
  auto trust = std::make_shared<ConnectionTrust>();
  trust->opened = opened;
  trust->peer = "fuzzer";
  int refusals = 0;
  auto pipe = kj::newTwoWayPipe();
  GuardedStream guarded(kj::mv(pipe.ends[0]), trust, limits,
                        [&](const std::string&) { ++refusals; });
  auto written = pipe.ends[1]->write(data, size).then([&]() { pipe.ends[1]->shutdownWrite(); })
                     .eagerlyEvaluate([](kj::Exception&&) {});

  capnp::ReaderOptions options;
  options.traversalLimitInWords = (uint64_t{1} << 30) / 8;
  uint64_t handed = 0;
  for (int messages = 0; messages < 1000; ++messages) {
    kj::Maybe<kj::Own<capnp::MessageReader>> next;
    try {
      next = capnp::tryReadMessage(guarded, options).wait(wait_scope);
    } catch (const kj::Exception&) {
      break;  // refused, or not a message: the connection ends
    }
    KJ_IF_MAYBE(message, next) {
      const uint64_t bytes = message_bytes(**message);
      handed += bytes;
      uint64_t limit = 0;
      if (!opened) {
        limit = limits.message_bytes_before_open;
        if (handed > limits.total_bytes_before_open) finding("more than the budget before open");
      } else if (by_kind) {
        auto first = (*message)->getSegment(0);
        const auto kind = rpc_message_kind(reinterpret_cast<const kj::byte*>(first.begin()),
                                           first.size());
        const bool listed = kind.call && limits.calls.count({kind.interface_id, kind.method_id});
        limit = listed ? kCallLimit : kOtherLimit;
      } else {
        limit = kFlatLimit;
      }
      if (bytes > limit) {
        finding("a message of " + std::to_string(bytes) + " bytes handed over, limit " +
                std::to_string(limit));
      }
    } else {
      break;  // the stream ended cleanly
    }
  }
  return 0;
}
