#include "libs/config/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "libs/config/config_error.h"
#include "libs/config/read_all.h"

namespace ravnest::config {
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

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp." + std::to_string(static_cast<long>(::getpid())) + "." +
                           std::to_string(g_temp_counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    throw std::runtime_error(path + ": cannot write: " + error_text(errno));
  }
  auto fail = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw std::runtime_error(path + ": cannot write (" + what + "): " + error_text(err));
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw std::runtime_error(path + ": cannot write (close): " + error_text(err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw std::runtime_error(path + ": cannot write (rename): " + error_text(err));
  }
  // Make the rename itself durable; a failure here does not undo the write, so it is ignored.
  const int dir = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
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

}  // namespace ravnest::config
