#include "libs/wire/tensor_stream.h"

#include "libs/wire/resolved_client.h"

#include <ATen/ATen.h>
#include <kj/debug.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "libs/wire/value_codec.h"

namespace ravnest::wire {

namespace {

// A KJ exception whose description is `message` alone: what the peer reads (KJ_EXCEPTION with
// arguments would append "name = value" for each).
kj::Exception stream_error(kj::Exception::Type type, const std::string& message) {
  return kj::Exception(type, __FILE__, __LINE__, kj::heapString(message));
}

std::string bytes_text(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// TensorSink

TensorSink::TensorSink(std::vector<at::Tensor> targets,
                       kj::Own<kj::PromiseFulfiller<void>> completion)
    : targets_(std::move(targets)), completion_(kj::mv(completion)) {
  for (const auto& t : targets_) {
    KJ_REQUIRE(t.defined() && t.device().is_cpu() && t.is_contiguous() &&
                   t.layout() == c10::kStrided,
               "TensorSink targets must be contiguous CPU tensors");
    expected_ += tensor_bytes(t);
  }
}

TensorSink::~TensorSink() noexcept(false) {
  if (completion_.get() != nullptr && completion_->isWaiting()) {
    completion_->reject(stream_error(kj::Exception::Type::DISCONNECTED,
                                     "tensor stream released before done(), after " +
                                         bytes_text(received_) + " of " + bytes_text(expected_)));
  }
}

SinkAndCompletion TensorSink::open(std::vector<at::Tensor> targets) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto sink = kj::heap<TensorSink>(std::move(targets), kj::mv(paf.fulfiller));
  return {kj::mv(sink), kj::mv(paf.promise)};
}

void TensorSink::fail(kj::Exception&& e) {
  if (failure_ == nullptr) failure_ = kj::cp(e);
  if (completion_.get() != nullptr) completion_->reject(kj::cp(e));
  kj::throwFatalException(kj::mv(e));
}

kj::Promise<void> TensorSink::write(WriteContext context) {
  KJ_IF_MAYBE(e, failure_) { kj::throwFatalException(kj::cp(*e)); }
  if (finished_) fail(KJ_EXCEPTION(FAILED, "ByteSink: write after done()"));
  auto chunk = context.getParams().getChunk();
  const kj::byte* p = chunk.begin();
  size_t n = chunk.size();
  if (n > expected_ - received_) {
    fail(stream_error(kj::Exception::Type::FAILED,
                      "tensor stream: more bytes arrived than announced (" +
                          bytes_text(received_ + n) + ", " + bytes_text(expected_) + " announced)"));
  }
  while (n > 0) {
    at::Tensor& t = targets_[index_];
    uint64_t size = tensor_bytes(t);
    if (offset_ == size) {
      ++index_;
      offset_ = 0;
      continue;
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, size - offset_));
    if (t.scalar_type() == at::kBool) {
      for (size_t i = 0; i < take; ++i) {
        if (p[i] > 1) fail(KJ_EXCEPTION(FAILED, "ByteSink: bool tensor byte other than 0 and 1"));
      }
    }
    std::memcpy(static_cast<kj::byte*>(t.data_ptr()) + offset_, p, take);
    p += take;
    n -= take;
    offset_ += take;
    received_ += take;
  }
  return kj::READY_NOW;
}

kj::Promise<void> TensorSink::done(DoneContext) {
  KJ_IF_MAYBE(e, failure_) { kj::throwFatalException(kj::cp(*e)); }
  if (finished_) return kj::READY_NOW;
  if (received_ != expected_) {
    fail(stream_error(kj::Exception::Type::FAILED,
                      "tensor stream: done() before all announced bytes arrived (" +
                          bytes_text(received_) + " of " + bytes_text(expected_) + ")"));
  }
  finished_ = true;
  if (completion_.get() != nullptr) completion_->fulfill();
  return kj::READY_NOW;
}

// ---------------------------------------------------------------------------------------------
// stream_tensors

namespace {

struct StreamState {
  StreamState(schema::ByteSink::Client sink, std::vector<at::Tensor> tensors, size_t chunk)
      : sink(kj::mv(sink)), tensors(std::move(tensors)), chunk(chunk) {}

  // Abandoned mid-stream (the promise was dropped): queued writes may still reference our
  // memory, so hand the memory to a detached round trip (done(), which also tells the receiver
  // the stream ended short) and release it only when that returns. Skipped when the event loop
  // is shutting down (the connection goes with it).
  ~StreamState() noexcept(false) {
    if (!sent_any || settled) return;
    auto holder = kj::heap<std::vector<at::Tensor>>(std::move(tensors));
    kj::runCatchingExceptions([&]() {
      kj::evalLater([sink = kj::mv(sink)]() mutable {
        return sink.doneRequest().send().ignoreResult();
      })
          .attach(kj::mv(holder))
          .detach([](kj::Exception&&) {});
    });
  }

  schema::ByteSink::Client sink;
  std::vector<at::Tensor> tensors;  // keeps the memory alive
  std::vector<kj::ArrayPtr<const kj::byte>> spans;
  size_t chunk;
  size_t span = 0;
  size_t offset = 0;
  bool sent_any = false;
  bool settled = false;
};

size_t normalize_chunk(size_t chunk_bytes) {
  size_t c = std::min<size_t>(chunk_bytes, kMaxDataBytes);
  c -= c % 8;
  return std::max<size_t>(c, 8);
}

kj::Promise<void> pump(StreamState& s) {
  while (s.span < s.spans.size()) {
    auto bytes = s.spans[s.span];
    size_t remaining = bytes.size() - s.offset;
    if (remaining == 0) {
      ++s.span;
      s.offset = 0;
      continue;
    }
    const kj::byte* p = bytes.begin() + s.offset;
    size_t n = std::min(remaining, s.chunk);
    bool aligned = reinterpret_cast<uintptr_t>(p) % 8 == 0;
    s.sink = resolved_client(kj::mv(s.sink));  // once the sink arrived: chunks sent uncopied
    auto request = s.sink.writeRequest(capnp::MessageSize{8, 0});
    if (aligned && n >= 8) {
      // referenceExternalData needs word alignment and would expose the bytes up to the next
      // word: send whole words by reference, the last < 8 bytes of a span in a copied write.
      n -= n % 8;
      auto orphanage = capnp::Orphanage::getForMessageContaining(
          static_cast<schema::ByteSink::WriteParams::Builder&>(request));
      request.adoptChunk(orphanage.referenceExternalData(capnp::Data::Reader(p, n)));
    } else {
      auto data = request.initChunk(static_cast<unsigned>(n));
      std::memcpy(data.begin(), p, n);
    }
    s.offset += n;
    s.sent_any = true;
    return request.send().then([&s]() { return pump(s); });
  }
  return s.sink.doneRequest(capnp::MessageSize{4, 0}).send().ignoreResult().then([&s]() {
    s.settled = true;
  });
}

kj::Promise<void> run(kj::Own<StreamState> state) {
  StreamState& s = *state;
  return kj::evalNow([&s]() { return pump(s); })
      .catch_([&s](kj::Exception&& e) -> kj::Promise<void> {
        if (!s.sent_any || s.settled) return kj::mv(e);
        // One round trip after the failure: when it returns, every write queued before it has
        // left this process, so the memory can go.
        auto error = kj::cp(e);
        return s.sink.doneRequest(capnp::MessageSize{4, 0})
            .send()
            .ignoreResult()
            .then([]() {}, [](kj::Exception&&) {})
            .then([&s, error = kj::mv(error)]() mutable -> kj::Promise<void> {
              s.settled = true;
              return kj::mv(error);
            });
      })
      .attach(kj::mv(state));
}

}  // namespace

kj::Promise<void> stream_tensors(schema::ByteSink::Client sink, std::vector<at::Tensor> tensors,
                                 size_t chunk_bytes) {
  kj::Own<StreamState> state;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
    for (auto& t : tensors) t = wire_form(t);
    state = kj::heap<StreamState>(kj::mv(sink), std::move(tensors), normalize_chunk(chunk_bytes));
    for (const auto& t : state->tensors) {
      uint64_t bytes = tensor_bytes(t);
      if (bytes > 0) {
        state->spans.push_back(
            kj::ArrayPtr<const kj::byte>(static_cast<const kj::byte*>(t.data_ptr()), bytes));
      }
    }
  })) {
    return kj::mv(*e);  // a rejected promise rather than a throw, like the failures that follow
  }
  return run(kj::mv(state));
}

kj::Promise<void> stream_bytes(schema::ByteSink::Client sink, kj::ArrayPtr<const kj::byte> bytes,
                               size_t chunk_bytes) {
  auto state = kj::heap<StreamState>(kj::mv(sink), std::vector<at::Tensor>{},
                                     normalize_chunk(chunk_bytes));
  if (bytes.size() > 0) state->spans.push_back(bytes);
  return run(kj::mv(state));
}

// ---------------------------------------------------------------------------------------------
// FileSink

namespace {

std::string lower_hex(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void fsync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

FileSink::FileSink(std::filesystem::path dir, std::string name, uint64_t size,
                   std::string sha256_hex, kj::Own<kj::PromiseFulfiller<void>> completion,
                   Commit commit)
    : dir_(std::move(dir)),
      final_path_(dir_ / name),
      expected_(size),
      expected_sha256_(lower_hex(std::move(sha256_hex))),
      completion_(kj::mv(completion)),
      commit_(std::move(commit)) {
  if (expected_sha256_.size() != 64 ||
      !std::all_of(expected_sha256_.begin(), expected_sha256_.end(),
                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    kj::throwFatalException(stream_error(
        kj::Exception::Type::FAILED, name + ": the checksum is not a SHA-256 hex string"));
  }
  std::string pattern = (dir_ / ("." + name + ".XXXXXX.part")).string();
  fd_ = ::mkostemps(pattern.data(), 5, O_CLOEXEC);
  if (fd_ < 0) {
    int error = errno;
    kj::throwFatalException(stream_error(
        kj::Exception::Type::FAILED, final_path_.string() + ": cannot write: " + strerror(error)));
  }
  temp_path_ = pattern;
}

FileSink::~FileSink() noexcept(false) {
  if (!finished_) {
    discard();
    if (completion_.get() != nullptr && completion_->isWaiting()) {
      completion_->reject(stream_error(kj::Exception::Type::DISCONNECTED,
                                       final_path_.string() + ": released before done(), after " +
                                           bytes_text(received_) + " of " +
                                           bytes_text(expected_)));
    }
  }
}

SinkAndCompletion FileSink::open(std::filesystem::path dir, std::string name, uint64_t size,
                                 std::string sha256_hex, Commit commit) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto sink = kj::heap<FileSink>(std::move(dir), std::move(name), size, std::move(sha256_hex),
                                 kj::mv(paf.fulfiller), std::move(commit));
  return {kj::mv(sink), kj::mv(paf.promise)};
}

void FileSink::discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

void FileSink::fail(kj::Exception&& e) {
  if (failure_ == nullptr) failure_ = kj::cp(e);
  discard();
  if (completion_.get() != nullptr) completion_->reject(kj::cp(e));
  kj::throwFatalException(kj::mv(e));
}

kj::Promise<void> FileSink::write(WriteContext context) {
  KJ_IF_MAYBE(e, failure_) { kj::throwFatalException(kj::cp(*e)); }
  if (finished_) fail(KJ_EXCEPTION(FAILED, "file ByteSink: write after done()"));
  auto chunk = context.getParams().getChunk();
  if (chunk.size() > expected_ - received_) {
    fail(stream_error(kj::Exception::Type::FAILED,
                      final_path_.string() + ": more bytes arrived than announced (" +
                          bytes_text(received_ + chunk.size()) + ", " + bytes_text(expected_) +
                          " announced)"));
  }
  const kj::byte* p = chunk.begin();
  size_t n = chunk.size();
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      fail(stream_error(kj::Exception::Type::FAILED,
                        final_path_.string() + ": cannot write: " + strerror(error)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  hash_.update(chunk.begin(), chunk.size());
  received_ += chunk.size();
  pages_.wrote(chunk.size());  // a dataset's pages do not stay charged to the daemon
  return kj::READY_NOW;
}

kj::Promise<void> FileSink::done(DoneContext) {
  KJ_IF_MAYBE(e, failure_) { kj::throwFatalException(kj::cp(*e)); }
  if (finished_) return kj::READY_NOW;
  if (received_ != expected_) {
    fail(stream_error(kj::Exception::Type::FAILED,
                      final_path_.string() + ": size mismatch: " + bytes_text(received_) +
                          " arrived, " + bytes_text(expected_) + " announced"));
  }
  std::string actual = hash_.hex();
  if (actual != expected_sha256_) {
    fail(stream_error(kj::Exception::Type::FAILED,
                      final_path_.string() + ": SHA-256 mismatch: the bytes received hash to " +
                          actual + ", expected " + expected_sha256_));
  }
  if (::fsync(fd_) != 0) {
    int error = errno;
    fail(stream_error(kj::Exception::Type::FAILED,
                      final_path_.string() + ": cannot write (fsync): " + strerror(error)));
  }
  pages_.release_all();
  ::close(fd_);
  fd_ = -1;
  if (commit_) {
    std::string refused;
    try {
      commit_(temp_path_);
    } catch (const std::exception& e) {
      refused = e.what();
    }
    if (!refused.empty()) fail(stream_error(kj::Exception::Type::FAILED, refused));
  } else if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    int error = errno;
    fail(stream_error(kj::Exception::Type::FAILED,
                      final_path_.string() + ": cannot write (rename): " + strerror(error)));
  }
  temp_path_.clear();
  fsync_dir(dir_);
  finished_ = true;
  if (completion_.get() != nullptr) completion_->fulfill();
  return kj::READY_NOW;
}

}  // namespace ravnest::wire
