#include "libs/wire/coalescing_stream.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace ravnest::wire {

CoalescingStream::CoalescingStream(kj::Own<kj::AsyncIoStream> inner)
    : inner_(kj::mv(inner)), sent_(kj::Promise<void>(kj::READY_NOW).fork()), tasks_(*this) {}

CoalescingStream::~CoalescingStream() noexcept(false) {
  if (filling_.empty() || writing_ || write_error_ != nullptr) return;
  KJ_IF_MAYBE(fd, inner_->getFd()) {
    // Best effort, as the kernel does with a closed socket's last bytes: what does not fit now
    // is lost with the connection.
    (void)::send(*fd, filling_.data(), filling_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void CoalescingStream::taskFailed(kj::Exception&&) {}

kj::Promise<void> CoalescingStream::write(const void* buffer, size_t size) {
  const kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
  // The array of pieces must outlive the returned promise: keep it with it.
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>({piece});
  auto view = pieces.asPtr();
  return write(view).attach(kj::mv(pieces));
}

kj::Promise<void> CoalescingStream::write(
    kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  KJ_IF_MAYBE(e, write_error_) return kj::cp(*e);
  size_t total = 0;
  for (auto piece : pieces) total += piece.size();
  if (filling_.size() + total <= kWriteBufferBytes) {
    for (auto piece : pieces) filling_.insert(filling_.end(), piece.begin(), piece.end());
    if (total > 0) schedule_write_out();
    return kj::READY_NOW;
  }
  // It does not fit: what is buffered goes first. Then a large write goes straight to the socket
  // (nothing is buffered or being written: the caller waits for this write, and only writes fill
  // the buffer), a smaller one into the emptied buffer.
  return write_out().then([this, pieces, total]() -> kj::Promise<void> {
    if (total > kWriteBufferBytes) return inner_->write(pieces);
    return write(pieces);
  });
}

void CoalescingStream::schedule_write_out() {
  if (write_out_scheduled_) return;
  write_out_scheduled_ = true;
  tasks_.add(kj::evalLast([this]() {
    write_out_scheduled_ = false;
    return write_out();
  }));
}

kj::Promise<void> CoalescingStream::write_out() {
  if (writing_) return sent_.addBranch().then([this]() { return write_out(); });
  KJ_IF_MAYBE(e, write_error_) return kj::cp(*e);
  if (filling_.empty()) return kj::READY_NOW;
  std::swap(filling_, sending_);
  filling_.clear();
  writing_ = true;
  // evalNow: a write that throws at once (a closed socket) fails the promise instead.
  sent_ = kj::evalNow([this]() { return inner_->write(sending_.data(), sending_.size()); })
              .then([this]() { writing_ = false; },
                    [this](kj::Exception&& e) {
                      writing_ = false;
                      write_error_ = kj::cp(e);
                      kj::throwFatalException(kj::mv(e));
                    })
              .fork();
  return sent_.addBranch();
}

kj::Promise<void> CoalescingStream::whenWriteDisconnected() {
  return inner_->whenWriteDisconnected();
}

void CoalescingStream::shutdownWrite() {
  if (filling_.empty() && !writing_) {
    inner_->shutdownWrite();
    return;
  }
  tasks_.add(write_out().then([this]() { inner_->shutdownWrite(); }));
}

kj::Promise<size_t> CoalescingStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  auto* out = static_cast<kj::byte*>(buffer);
  const size_t got = std::min(maxBytes, read_end_ - read_begin_);
  if (got > 0) {
    std::memcpy(out, read_.data() + read_begin_, got);
    read_begin_ += got;
  }
  if (got >= minBytes) return got;
  return read_more(out + got, minBytes - got, maxBytes - got, got);
}

kj::Promise<size_t> CoalescingStream::read_more(kj::byte* buffer, size_t minBytes, size_t maxBytes,
                                                size_t got) {
  // The buffered bytes are all handed out. A large read goes straight into the caller's memory.
  if (maxBytes >= kReadBufferBytes) {
    return inner_->tryRead(buffer, minBytes, maxBytes).then([got](size_t n) { return got + n; });
  }
  if (read_.size() < kReadBufferBytes) read_.resize(kReadBufferBytes);
  return inner_->tryRead(read_.data(), 1, kReadBufferBytes)
      .then([this, buffer, minBytes, maxBytes, got](size_t n) -> kj::Promise<size_t> {
        read_begin_ = 0;
        read_end_ = n;
        if (n == 0) return got;  // the end of the stream: fewer than asked, as tryRead says
        return tryRead(buffer, minBytes, maxBytes).then([got](size_t m) { return got + m; });
      });
}

void CoalescingStream::getsockopt(int level, int option, void* value, kj::uint* length) {
  inner_->getsockopt(level, option, value, length);
}

void CoalescingStream::setsockopt(int level, int option, const void* value, kj::uint length) {
  inner_->setsockopt(level, option, value, length);
}

void CoalescingStream::getsockname(struct sockaddr* addr, kj::uint* length) {
  inner_->getsockname(addr, length);
}

void CoalescingStream::getpeername(struct sockaddr* addr, kj::uint* length) {
  inner_->getpeername(addr, length);
}

}  // namespace ravnest::wire
