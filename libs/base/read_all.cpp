#include "libs/base/read_all.h"

#include <unistd.h>

#include <cerrno>

namespace ravnest::base {

int read_all(int fd, std::string* out, size_t limit) {
  char buffer[65536];
  while (out->size() <= limit) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    out->append(buffer, static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace ravnest::base
