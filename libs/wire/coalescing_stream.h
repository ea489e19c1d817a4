// CoalescingStream: the socket under kj-tls, with its small writes and reads batched.
//
// kj-tls moves bytes between OpenSSL and the socket through 8 KiB buffers
// (kj/compat/readiness-io.h): each 16 KiB TLS record costs two or more write syscalls on one side
// and as many reads on the other, and on loopback each write runs the receiver's TCP stack too
// (measured: TLS cost the all-reduce between daemons a factor of 3, half of it in the kernel).
// This stream takes writes into a buffer and writes it out in one syscall when the buffer is
// full or when the event loop has nothing else to run (kj::evalLast): a write's promise resolves
// once its bytes are buffered, and bytes are never held back while the loop waits for I/O. It
// reads as much as the socket holds, up to a buffer, in one syscall and hands it out from there.
// A failed write-out fails the next write. Memory: at most kWriteBufferBytes twice and
// kReadBufferBytes per connection, allocated on first use.
//
// Single-threaded, like the stream it wraps; one write at a time (kj's contract for streams).
#pragma once

#include <cstddef>
#include <vector>

#include <kj/async-io.h>

namespace ravnest::wire {

class CoalescingStream final : public kj::AsyncIoStream, private kj::TaskSet::ErrorHandler {
 public:
  static constexpr size_t kWriteBufferBytes = 256 << 10;
  static constexpr size_t kReadBufferBytes = 128 << 10;

  explicit CoalescingStream(kj::Own<kj::AsyncIoStream> inner);
  // Hands what is still buffered to the socket without waiting (a TLS alert or close_notify
  // written just before the connection is dropped must still reach the peer).
  ~CoalescingStream() noexcept(false);

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;  // after what is buffered has been written out
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override;
  void setsockopt(int level, int option, const void* value, kj::uint length) override;
  void getsockname(struct sockaddr* addr, kj::uint* length) override;
  void getpeername(struct sockaddr* addr, kj::uint* length) override;
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

 private:
  void taskFailed(kj::Exception&& exception) override;  // recorded in write_error_ already
  // Writes out what is buffered, after the write-out in progress; resolves when it is written.
  kj::Promise<void> write_out();
  void schedule_write_out();
  kj::Promise<size_t> read_more(kj::byte* buffer, size_t minBytes, size_t maxBytes, size_t got);

  kj::Own<kj::AsyncIoStream> inner_;
  std::vector<kj::byte> filling_;  // accepted, not yet handed to the socket
  std::vector<kj::byte> sending_;  // being written by the socket (while writing_)
  bool writing_ = false;
  bool write_out_scheduled_ = false;
  kj::Maybe<kj::Exception> write_error_;
  kj::ForkedPromise<void> sent_;   // the write-out in progress, or ready
  std::vector<kj::byte> read_;     // read from the socket, not yet handed out: [read_begin_, read_end_)
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
  kj::TaskSet tasks_;              // scheduled write-outs; last: destroyed first
};

}  // namespace ravnest::wire
