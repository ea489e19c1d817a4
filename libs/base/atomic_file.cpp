#include "libs/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "libs/base/config_error.h"
#include "libs/base/read_all.h"
#include "libs/base/written_pages.h"

namespace ravnest::base {
namespace {

std::atomic<unsigned long> g_temp_counter{0};

std::string error_text(int err) { return std::strerror(err); }

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)),
      temp_(path_ + ".tmp." + std::to_string(static_cast<long>(::getpid())) + "." +
            std::to_string(g_temp_counter.fetch_add(1))) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot write: " + error_text(errno));
  pages_ = WrittenPages(fd_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFileWriter::fail(const char* what, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  throw std::runtime_error(path_ + ": cannot write (" + what + "): " + error_text(err));
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) throw std::logic_error(path_ + ": written after commit or failure");
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, bytes + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    done += static_cast<size_t>(n);
  }
  pages_.wrote(size);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error(path_ + ": committed twice or after a failure");
  if (::fsync(fd_) != 0) fail("fsync", errno);
  pages_.release_all();
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    ::unlink(temp_.c_str());
    throw std::runtime_error(path_ + ": cannot write (close): " + error_text(err));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    throw std::runtime_error(path_ + ": cannot write (rename): " + error_text(err));
  }
  // Make the rename itself durable; a failure here does not undo the write, so it is ignored.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes.data(), bytes.size());
  writer.commit();
}

void write_file_unsynced(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot write: " + error_text(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw std::runtime_error(path + ": cannot write: " + error_text(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw std::runtime_error(path + ": cannot write: " + error_text(errno));
}

void sync_filesystem_of(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open to sync: " + error_text(errno));
  const int rc = ::syncfs(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error(path + ": cannot sync: " + error_text(err));
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(path + ": cannot read: " + error_text(errno));
  std::string out;
  const int err = read_all(fd, &out);
  ::close(fd);
  if (err != 0) throw ConfigError(path + ": cannot read: " + error_text(err));
  return out;
}

}  // namespace ravnest::base
