// DataDirLock: one ravnestd per data directory. A second daemon started on a directory in use
// would write the same stage, checkpoints and losses as the first, and its start-up cleanup
// would delete the live daemon's temporaries (issue 28's probe). The lock is an flock on
// DIR/lock, held from construction to destruction (and released by the kernel when the process
// dies, so a killed daemon never leaves a stale lock); the file holds the holder's pid, for the
// message. A lock file deleted or replaced while its daemon runs would let a second one lock the
// new file: the daemon also holds a shared open-file-description lock (fcntl F_OFD_SETLK) on DIR
// itself, which a second daemon looks for before it takes its own. (fcntl locks and flock do not
// interact on Linux, so base::EditLock's flock on a directory is not affected.)
#pragma once

#include <filesystem>

namespace ravnest::store {

class DataDirLock {
 public:
  // Creates `dir` when missing, then takes the lock. Throws std::runtime_error, one line, when
  // another process holds it: "data directory DIR is in use by another ravnestd (pid N); give
  // each daemon its own --data-dir" (without the pid, and saying the lock file was deleted or
  // replaced, when only DIR's lock shows it), or when the lock file cannot be opened.
  explicit DataDirLock(const std::filesystem::path& dir);
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  int fd_ = -1;
  int dir_fd_ = -1;  // DIR, its shared fcntl lock
};

}  // namespace ravnest::store
