// ReplayStream: a stream some of whose first bytes were already read (to see which protocol the
// peer speaks: protocol_mismatch.h), handing those bytes out again before the rest. Everything
// else goes to the stream it wraps. Single-threaded, like that stream.
#pragma once

#include <kj/async-io.h>

namespace ravnest::wire {

class ReplayStream final : public kj::AsyncIoStream {
 public:
  ReplayStream(kj::Own<kj::AsyncIoStream> inner, kj::Array<kj::byte> read_ahead)
      : inner_(kj::mv(inner)), ahead_(kj::mv(read_ahead)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
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
  kj::Own<kj::AsyncIoStream> inner_;
  kj::Array<kj::byte> ahead_;
  size_t handed_ = 0;  // of ahead_
};

}  // namespace ravnest::wire
