// Bytes through a schema::ByteSink with capnp streaming (`write -> stream`): the sender keeps a
// bounded window of writes in flight (capnp's flow controller; over TCP the window follows the
// socket's send buffer), the receiver copies each chunk straight to its final place.
//
// Everything here runs on one KJ event loop thread (the RPC thread).
#pragma once

#include <ATen/core/Tensor.h>
#include <kj/async.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "libs/base/sha256.h"
#include "libs/base/written_pages.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

constexpr size_t kDefaultChunkBytes = size_t{1} << 20;

// A sink's client with the promise of its completion.
struct SinkAndCompletion {
  schema::ByteSink::Client sink;
  // Resolves once done() verified the bytes; rejects when a write or done() fails, or when the
  // sink is released (the peer dropped it or disconnected) before done().
  kj::Promise<void> completion;
};

// Receives the bytes of `targets` (CPU, contiguous; e.g. the `pending` tensors of decode_values)
// in order, each chunk copied straight into the tensors' memory (a chunk may span tensors).
// A write past the announced total fails, and so does done() when fewer bytes arrived; bool
// targets accept only bytes 0 and 1.
class TensorSink final : public schema::ByteSink::Server {
 public:
  TensorSink(std::vector<at::Tensor> targets, kj::Own<kj::PromiseFulfiller<void>> completion);
  ~TensorSink() noexcept(false);
  KJ_DISALLOW_COPY(TensorSink);

  static SinkAndCompletion open(std::vector<at::Tensor> targets);

  uint64_t expected_bytes() const { return expected_; }
  uint64_t received_bytes() const { return received_; }

 protected:
  kj::Promise<void> write(WriteContext context) override;
  kj::Promise<void> done(DoneContext context) override;

 private:
  [[noreturn]] void fail(kj::Exception&& e);

  std::vector<at::Tensor> targets_;
  kj::Own<kj::PromiseFulfiller<void>> completion_;
  kj::Maybe<kj::Exception> failure_;
  size_t index_ = 0;     // current target
  uint64_t offset_ = 0;  // bytes written into the current target
  uint64_t expected_ = 0;
  uint64_t received_ = 0;
  bool finished_ = false;
};

// Sends the bytes of `tensors`, in order, as streaming `write` calls of at most `chunk_bytes`
// (rounded down to a multiple of 8), each chunk referencing the tensor's memory
// (referenceExternalData: no copy), then calls done(). Tensors not already in wire_form() are
// converted first (a copy); a tensor wire_form() refuses makes the promise reject. The tensors are kept alive until the
// returned promise settles; on failure it first waits until the peer has seen every queued
// write (one more round trip) so no queued message outlives the memory it references.
// Do not drop the returned promise while the connection is alive: writes already queued in the
// connection would reference freed memory. Let it settle (failing the sink's peer, or
// disconnecting, makes it settle promptly).
kj::Promise<void> stream_tensors(schema::ByteSink::Client sink, std::vector<at::Tensor> tensors,
                                 size_t chunk_bytes = kDefaultChunkBytes);

// Streams arbitrary bytes the caller keeps alive until the promise settles (same rules).
kj::Promise<void> stream_bytes(schema::ByteSink::Client sink, kj::ArrayPtr<const kj::byte> bytes,
                               size_t chunk_bytes = kDefaultChunkBytes);

// Writes the bytes to a temporary file `.<name>.XXXXXX.part` in `dir`; done() checks the size
// and SHA-256 (lowercase or uppercase hex), fsyncs, renames to `dir/name` (replacing it) and
// fsyncs the directory. A write past `size`, a mismatch at done(), or destruction before done()
// deletes the temporary file. The caller validates `name` (a plain file name).
// With a `commit`, done() hands it the checked, fsynced temporary file in place of the rename:
// it takes the file (renames it where it belongs) or throws std::exception to refuse it (the
// temporary is then removed, and done() fails with the exception's message). A pushed stage is
// checked to load this way before it replaces the stored one.
// Writes are synchronous (blocking disk I/O on the RPC thread, one chunk at a time).
class FileSink final : public schema::ByteSink::Server {
 public:
  using Commit = std::function<void(const std::filesystem::path& temp)>;

  // Throws kj::Exception when the temporary file cannot be created.
  FileSink(std::filesystem::path dir, std::string name, uint64_t size, std::string sha256_hex,
           kj::Own<kj::PromiseFulfiller<void>> completion = {}, Commit commit = {});
  ~FileSink() noexcept(false);
  KJ_DISALLOW_COPY(FileSink);

  static SinkAndCompletion open(std::filesystem::path dir, std::string name, uint64_t size,
                                std::string sha256_hex, Commit commit = {});

  const std::filesystem::path& temp_path() const { return temp_path_; }
  const std::filesystem::path& final_path() const { return final_path_; }

 protected:
  kj::Promise<void> write(WriteContext context) override;
  kj::Promise<void> done(DoneContext context) override;

 private:
  [[noreturn]] void fail(kj::Exception&& e);
  void discard();

  std::filesystem::path dir_;
  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  uint64_t expected_;
  uint64_t received_ = 0;
  std::string expected_sha256_;
  base::Sha256 hash_;
  base::WrittenPages pages_{-1};  // set once fd_ is open
  kj::Own<kj::PromiseFulfiller<void>> completion_;
  Commit commit_;
  kj::Maybe<kj::Exception> failure_;
  bool finished_ = false;
};

}  // namespace ravnest::wire
