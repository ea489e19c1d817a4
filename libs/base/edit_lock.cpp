#include "libs/base/edit_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace ravnest::base {

EditLock::EditLock(const std::filesystem::path& dir) {
  // The directory, not a file in it: its files are replaced by renames (atomic_file.h), and a
  // lock file would be one more file in a plan directory.
  const std::filesystem::path path = dir.empty() ? std::filesystem::path(".") : dir;
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(path.string() + ": cannot open the directory to lock it for an "
                             "edit: " + std::strerror(errno));
  }
  int locked;
  do {
    locked = ::flock(fd_, LOCK_EX);
  } while (locked != 0 && errno == EINTR);
  if (locked != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(path.string() + ": cannot lock: " + std::strerror(error));
  }
}

EditLock::~EditLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace ravnest::base
