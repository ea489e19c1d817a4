// Reading an open file descriptor to its end: the one read loop behind read_file() and
// read_secret(), which differ only in what they check before and after it.
#pragma once

#include <cstddef>
#include <limits>
#include <string>

namespace ravnest::base {

// Appends what `fd` holds from its position to its end to *out, retrying reads a signal
// interrupted. Returns 0, or the errno of the read that failed (*out keeps what came before).
// Stops early, returning 0, as soon as *out is longer than `limit`: the caller tells that case
// by the size. Does not close `fd`.
int read_all(int fd, std::string* out, size_t limit = std::numeric_limits<size_t>::max());

}  // namespace ravnest::base
