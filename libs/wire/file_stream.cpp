#include "libs/wire/file_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <kj/debug.h>

#include "libs/base/atomic_file.h"
#include "libs/base/sha256.h"
#include "libs/wire/resolved_client.h"

namespace ravnest::wire {

namespace {

kj::Exception file_error(const std::string& message) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(message));
}

// Pages read are dropped from the cache every this many bytes (a read-once file).
constexpr uint64_t kReleaseWindow = uint64_t{8} << 20;

struct Sender {
  Sender(schema::ByteSink::Client sink, std::filesystem::path path, int fd, size_t chunk)
      : sink(kj::mv(sink)), path(std::move(path)), fd(fd), chunk(chunk) {}
  ~Sender() { ::close(fd); }

  schema::ByteSink::Client sink;
  std::filesystem::path path;
  int fd;
  size_t chunk;
  uint64_t sent = 0;
  uint64_t released = 0;
  uint64_t* progress = nullptr;
  base::Sha256 hash;
};

// Reads the next chunk straight into a write request's message and sends it; capnp's streaming
// send resolves once the window has room, so at most a window of chunks is in memory.
kj::Promise<void> pump(Sender& s) {
  s.sink = resolved_client(kj::mv(s.sink));
  auto request = s.sink.writeRequest(capnp::MessageSize{s.chunk / 8 + 8, 0});
  auto data = request.initChunk(static_cast<unsigned>(s.chunk));
  size_t have = 0;
  while (have < s.chunk) {
    const ssize_t n = ::pread(s.fd, data.begin() + have, s.chunk - have,
                              static_cast<off_t>(s.sent + have));
    if (n < 0) {
      if (errno == EINTR) continue;
      return file_error(s.path.string() + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  if (have == 0) return s.sink.doneRequest(capnp::MessageSize{4, 0}).send().ignoreResult();
  if (have < s.chunk) {
    // The file's last chunk: the message's Data is shortened to what was read.
    auto orphan = request.disownChunk();
    orphan.truncate(static_cast<unsigned>(have));
    request.adoptChunk(kj::mv(orphan));
  }
  s.hash.update(data.begin(), have);
  s.sent += have;
  if (s.progress) *s.progress = s.sent;
  if (s.sent - s.released >= kReleaseWindow) {
    ::posix_fadvise(s.fd, static_cast<off_t>(s.released), static_cast<off_t>(s.sent - s.released),
                    POSIX_FADV_DONTNEED);
    s.released = s.sent;
  }
  return request.send().then([&s]() { return pump(s); });
}

}  // namespace

kj::Promise<SentFile> stream_file(schema::ByteSink::Client sink, const std::filesystem::path& path,
                                  size_t chunk_bytes, uint64_t* progress) {
  // O_NONBLOCK: a FIFO in the file's place must not hang open() on the event loop's thread.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return file_error(path.string() + ": cannot read: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return file_error(path.string() + ": cannot read: not a regular file");
  }
  size_t chunk = std::min<size_t>(std::max<size_t>(chunk_bytes, 4096), kMaxDataBytes);
  auto sender = kj::heap<Sender>(kj::mv(sink), path, fd, chunk);
  sender->progress = progress;
  Sender& s = *sender;
  return kj::evalNow([&s]() { return pump(s); })
      .then([&s]() {
        ::posix_fadvise(s.fd, 0, 0, POSIX_FADV_DONTNEED);
        return SentFile{s.sent, s.hash.hex()};
      })
      .attach(kj::mv(sender));
}

// ---------------------------------------------------------------------------------------------
// FileDownload

struct FileDownload::State {
  explicit State(std::filesystem::path path) : path(std::move(path)), writer(this->path.string()) {}
  std::filesystem::path path;
  std::optional<base::AtomicFileWriter> writer;
  base::Sha256 hash;
  uint64_t received = 0;
  bool done = false;
  bool released = false;  // the FileDownload is gone or kept: writes fail
  std::string failure;
};

namespace {

class DownloadSink final : public schema::ByteSink::Server {
 public:
  explicit DownloadSink(std::shared_ptr<FileDownload::State> state) : state_(std::move(state)) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto& s = *state_;
    if (s.released || s.done || !s.failure.empty() || !s.writer) {
      return file_error(s.path.string() + ": no longer receiving");
    }
    auto chunk = context.getParams().getChunk();
    try {
      s.writer->write(chunk.begin(), chunk.size());
    } catch (const std::exception& e) {
      s.failure = e.what();
      s.writer.reset();
      return file_error(s.failure);
    }
    s.hash.update(chunk.begin(), chunk.size());
    s.received += chunk.size();
    return kj::READY_NOW;
  }
  kj::Promise<void> done(DoneContext) override {
    auto& s = *state_;
    if (!s.failure.empty()) return file_error(s.failure);
    s.done = true;
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<FileDownload::State> state_;
};

}  // namespace

FileDownload::FileDownload(std::filesystem::path path)
    : state_(std::make_shared<State>(std::move(path))) {}

FileDownload::~FileDownload() {
  state_->released = true;
  state_->writer.reset();  // removes the temporary unless kept
}

schema::ByteSink::Client FileDownload::sink() { return kj::heap<DownloadSink>(state_); }

uint64_t FileDownload::received_bytes() const { return state_->received; }

void FileDownload::keep(uint64_t bytes, const std::string& sha256) {
  auto& s = *state_;
  const std::string where = s.path.string() + ": ";
  if (!s.failure.empty()) throw std::runtime_error(s.failure);
  if (!s.writer || s.released) throw std::runtime_error(where + "kept twice");
  if (!s.done) {
    throw std::runtime_error(where + "the transfer ended after " + std::to_string(s.received) +
                             " bytes, before the sender said it was done");
  }
  if (s.received != bytes) {
    throw std::runtime_error(where + std::to_string(s.received) + " bytes arrived, the sender sent " +
                             std::to_string(bytes));
  }
  const std::string actual = s.hash.hex();
  if (actual != sha256) {
    throw std::runtime_error(where + "the bytes received hash to " + actual.substr(0, 12) +
                             ", the sender's to " + sha256.substr(0, 12) + ": damaged on the way");
  }
  s.writer->commit();
  s.writer.reset();
  s.released = true;
}

}  // namespace ravnest::wire
