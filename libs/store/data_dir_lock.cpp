#include "libs/store/data_dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace ravnest::store {

namespace fs = std::filesystem;

DataDirLock::DataDirLock(const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path path = dir / "lock";
  // O_NOFOLLOW: a symlink planted as DIR/lock is refused rather than followed.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    throw std::runtime_error(path.string() + ": cannot open the data directory's lock: " +
                             std::strerror(errno));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
    std::string holder;
    for (ssize_t i = 0; i < n && pid[i] >= '0' && pid[i] <= '9'; ++i) holder += pid[i];
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw std::runtime_error("data directory " + dir.string() + " is in use by another ravnestd" +
                               (holder.empty() ? "" : " (pid " + holder + ")") +
                               "; give each daemon its own --data-dir");
    }
    throw std::runtime_error(path.string() + ": cannot lock: " + std::strerror(error));
  }
  // A daemon whose lock file was deleted (or replaced) still holds DIR's lock.
  dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  struct flock shared {};
  shared.l_type = F_RDLCK;
  shared.l_whence = SEEK_SET;
  const bool probed = dir_fd_ >= 0 && ::fcntl(dir_fd_, F_OFD_GETLK, &probe) == 0;
  if (probed && probe.l_type != F_UNLCK) {
    ::close(dir_fd_);
    ::close(fd_);
    dir_fd_ = fd_ = -1;
    throw std::runtime_error("data directory " + dir.string() + " is in use by another ravnestd " +
                             "(its lock file was deleted or replaced); give each daemon its own " +
                             "--data-dir");
  }
  if (!probed || ::fcntl(dir_fd_, F_OFD_SETLK, &shared) != 0) {
    const int error = errno;
    if (dir_fd_ >= 0) ::close(dir_fd_);
    ::close(fd_);
    dir_fd_ = fd_ = -1;
    throw std::runtime_error(dir.string() + ": cannot lock the data directory: " +
                             std::strerror(error));
  }
  const std::string self = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, self.data(), self.size(), 0);
  }
}

DataDirLock::~DataDirLock() {
  if (dir_fd_ >= 0) ::close(dir_fd_);  // releases DIR's lock
  if (fd_ >= 0) ::close(fd_);          // releases the flock
}

}  // namespace ravnest::store
