// Files a job's data or script must be: regular files. A FIFO blocks whoever opens it (and
// `ravnest train` with it) until something writes; a device such as /dev/zero never ends, and
// reading it to its end ends in std::bad_alloc. So data is opened only through
// open_regular_file(), which never blocks on what it refuses, and the requester refuses such a
// path before anything ships (data/dataset_files.h).
#pragma once

#include <string>

namespace ravnest::base {

// Empty when `path` (symlinks followed) is a regular file or does not exist (the caller's own
// "no such file" says that better); otherwise what it is instead: "a FIFO", "a character
// device", "a block device", "a socket", "a directory".
std::string not_regular_file(const std::string& path);

// A read-only descriptor of `path`, which must be a regular file: opened without blocking (a
// FIFO with no writer would block a plain open) and checked on the descriptor, so a file
// swapped after a check is still refused. Throws ConfigError, one line:
// "<path>: is a FIFO, not a regular file", "<path>: cannot open: <strerror>".
int open_regular_file(const std::string& path);

}  // namespace ravnest::base
