// GuardedStream: the stream an RPC connection reads its Cap'n Proto messages from, bounding what
// the peer can make this process allocate and how long it can hold the connection
// (docs/security.md, "Limits").
//
// Cap'n Proto reads a message's frame header (segment count, segment sizes), allocates the whole
// message, then reads it: a header announcing a 2^31-word segment costs 16 GiB of address space
// before a single byte of it arrives. GuardedStream follows the framing of the bytes it hands
// over and fails the read that would hand over a header announcing more than the limit, before
// capnp sees it. Until the connection is open (its peer proved the secret at the gate: gate.h),
// the limit is small and the peer may send no more than a small budget of bytes in all. Once
// open, the limit is that of the message's kind: a call to a listed method gets its own, any
// other message (calls to other methods, returns, the protocol's bookkeeping) a small one. The
// kind is read from the start of the message's first segment (the call's interface and method),
// which GuardedStream reads ahead before it hands over the header of a message larger than the
// smallest limit.
//
// With a timer, a message must arrive within a time that grows with its size (a peer that sends
// a byte a second is closed), and an open connection on which nothing was read or written for
// the idle time is closed.
//
// A violation fails the read with a FAILED exception, which ends the connection, and is reported
// once through `on_refused` ("a message of 4808 bytes before authentication (the limit is 4096)").
//
// Single-threaded, like the stream it wraps.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kj/async-io.h>
#include <kj/timer.h>

#include "libs/wire/forwarding_stream.h"

namespace ravnest::wire {

// Whether a connection's peer has proved the secret: shared by the connection's stream and the
// gate that opens it (the gate may outlive the connection).
struct ConnectionTrust {
  bool opened = false;
  std::string peer;  // "127.0.0.1:43210", for messages
  // Before it opened: the bytes its reader handed over, and whether a refusal of it was reported
  // (by the reader or the gate), so that a connection ended by a malformed message, which
  // Cap'n Proto ends without a word, is reported once by the server (rpc_connection.h).
  uint64_t read_before_open = 0;
  bool refusal_reported = false;
};

// The largest call to one method a connection reads once open.
struct CallLimit {
  std::string name;  // "Node.pushStage", for messages
  uint64_t bytes = 0;
};

struct MessageLimits {
  uint64_t message_bytes_before_open = 4096;      // one message, header included
  uint64_t total_bytes_before_open = 16384;       // everything read until open
  uint64_t message_bytes = uint64_t{1} << 30;     // one message once open, when `calls` is empty
  // Once open, by kind (a daemon's connections): a call to a method listed here (by interface id
  // and method number) may be as large as its limit; any other message `other_message_bytes`.
  // Empty: every message may be `message_bytes`.
  std::map<std::pair<uint64_t, uint16_t>, CallLimit> calls;
  uint64_t other_message_bytes = uint64_t{1} << 20;
};

struct ConnectionTimeouts {
  // A message, from its first byte: grace + size / min_bytes_per_second. 0 grace: no limit.
  kj::Duration message_grace = 0 * kj::SECONDS;
  uint64_t min_bytes_per_second = 65536;
  // Once open: nothing read and nothing written for this long closes it. 0: never.
  kj::Duration idle = 0 * kj::SECONDS;
};

// What kind of Cap'n Proto RPC message starts with `words` (the first words of its first
// segment): a call's interface and method, or none (another message, or a layout that cannot be
// read from these words alone).
struct RpcMessageKind {
  bool call = false;
  uint64_t interface_id = 0;
  uint16_t method_id = 0;
};
RpcMessageKind rpc_message_kind(const kj::byte* words, size_t word_count);

class GuardedStream final : public ForwardingStream {
 public:
  // `timer`: null for no timeouts (then `timeouts` is ignored).
  GuardedStream(kj::Own<kj::AsyncIoStream> inner, std::shared_ptr<ConnectionTrust> trust,
                MessageLimits limits, std::function<void(const std::string&)> on_refused,
                kj::Timer* timer = nullptr, ConnectionTimeouts timeouts = {});

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;

 private:
  // Where follow() stopped: nothing to decide, a refusal, or a header whose limit depends on the
  // kind of its message (the body starts at `at` in the bytes followed).
  struct Followed {
    std::string refusal;
    bool needs_kind = false;
    size_t at = 0;
  };
  // Follows the framing over `size` bytes about to be handed over.
  Followed follow(const kj::byte* bytes, size_t size);
  // The limit of the message whose header was just read, and the check against it.
  std::string check_size(uint64_t message_bytes, const RpcMessageKind* kind);
  // Reads ahead the start of the message whose header ends the `size` bytes at `bytes` (some of
  // its body may follow the header there, from `at`), decides its limit, then goes on following.
  kj::Promise<size_t> classify(const kj::byte* bytes, size_t size, size_t at);
  kj::Promise<size_t> refuse(const std::string& why);
  kj::Promise<size_t> timed(kj::Promise<size_t> read);
  kj::Promise<void> expiry();
  // When the current wait for bytes ends the connection, and why; TimePoint max: never.
  std::pair<kj::TimePoint, std::string> deadline() const;

  std::shared_ptr<ConnectionTrust> trust_;
  MessageLimits limits_;
  uint64_t smallest_limit_ = 0;  // below it, a message's kind need not be read
  std::function<void(const std::string&)> on_refused_;
  kj::Timer* timer_;
  ConnectionTimeouts timeouts_;
  uint64_t read_before_open_ = 0;
  bool refused_ = false;
  // The framing: a header being read (count word, then sizes and padding), then a body skipped.
  std::vector<kj::byte> header_;
  uint64_t header_bytes_ = 0;  // the header's length once its first word is read; 0 before
  uint64_t body_left_ = 0;
  uint64_t first_segment_words_ = 0;  // of the message whose header was read last
  // Bytes read ahead (the start of a message's body), handed over before anything else.
  std::vector<kj::byte> ahead_;
  size_t ahead_at_ = 0;
  // Timeouts: when the message being read started and its size (0 while its header is read),
  // and the last time anything was read or written.
  kj::TimePoint message_start_;
  uint64_t message_size_ = 0;
  bool in_message_ = false;
  kj::TimePoint last_activity_;
};

}  // namespace ravnest::wire
