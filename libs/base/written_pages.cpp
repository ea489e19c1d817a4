#include "libs/base/written_pages.h"

#include <fcntl.h>

namespace ravnest::base {

void WrittenPages::wrote(uint64_t bytes) {
  written_ += bytes;
  if (written_ - released_ < kWindow) return;
  const auto from = static_cast<off64_t>(released_);
  const auto length = static_cast<off64_t>(written_ - released_);
  ::sync_file_range(fd_, from, length,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                        SYNC_FILE_RANGE_WAIT_AFTER);
  ::posix_fadvise(fd_, from, length, POSIX_FADV_DONTNEED);
  released_ = written_;
}

void WrittenPages::release_all() {
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  released_ = written_;
}

}  // namespace ravnest::base
