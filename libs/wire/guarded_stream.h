// GuardedStream: the stream an RPC connection reads its Cap'n Proto messages from, bounding what
// the peer can make this process allocate (docs/security.md).
//
// Cap'n Proto reads a message's frame header (segment count, segment sizes), allocates the whole
// message, then reads it: a header announcing a 2^31-word segment costs 16 GiB of address space
// before a single byte of it arrives. GuardedStream follows the framing of the bytes it hands
// over and fails the read that would hand over a header announcing more than the limit, before
// capnp sees it. Until the connection is open (its peer proved the secret at the gate: gate.h),
// the limit is small and the peer may send no more than a small budget of bytes in all; once open
// the limit is the large one of authenticated traffic (stages, checkpoints).
//
// A violation fails the read with a FAILED exception, which ends the connection, and is reported
// once through `on_refused` ("messages above 4096 bytes before authentication").
//
// Single-threaded, like the stream it wraps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kj/async-io.h>

namespace ravnest::wire {

// Whether a connection's peer has proved the secret: shared by the connection's stream and the
// gate that opens it (the gate may outlive the connection).
struct ConnectionTrust {
  bool opened = false;
  std::string peer;  // "127.0.0.1:43210", for messages
};

struct MessageLimits {
  uint64_t message_bytes_before_open = 4096;      // one message, header included
  uint64_t total_bytes_before_open = 16384;       // everything read until open
  uint64_t message_bytes = uint64_t{1} << 30;     // one message once open
};

class GuardedStream final : public kj::AsyncIoStream {
 public:
  GuardedStream(kj::Own<kj::AsyncIoStream> inner, std::shared_ptr<ConnectionTrust> trust,
                MessageLimits limits, std::function<void(const std::string&)> on_refused);

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override {
    return inner_->write(buffer, size);
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override {
    inner_->getsockname(addr, length);
  }
  void getpeername(struct sockaddr* addr, kj::uint* length) override {
    inner_->getpeername(addr, length);
  }
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

 private:
  // Follows the framing over `size` bytes about to be handed over; the reason they may not be,
  // or empty.
  std::string follow(const kj::byte* bytes, size_t size);
  kj::Promise<size_t> refuse(const std::string& why);

  kj::Own<kj::AsyncIoStream> inner_;
  std::shared_ptr<ConnectionTrust> trust_;
  MessageLimits limits_;
  std::function<void(const std::string&)> on_refused_;
  uint64_t read_before_open_ = 0;
  bool refused_ = false;
  // The framing: a header being read (count word, then sizes and padding), then a body skipped.
  std::vector<kj::byte> header_;
  uint64_t header_bytes_ = 0;  // the header's length once its first word is read; 0 before
  uint64_t body_left_ = 0;
};

}  // namespace ravnest::wire
