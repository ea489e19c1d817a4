// Writing user-visible files so that a reader never sees half of one: the bytes go to a
// temporary file in the same directory, are flushed, then renamed over the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "libs/base/written_pages.h"

namespace ravnest::base {

// Throws std::runtime_error naming the path when anything fails; the target is untouched then.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The same for a file written in pieces (a checkpoint streamed from its archive): the pieces go
// to the temporary file, whose pages leave the page cache as they reach the disk
// (written_pages.h); commit() fsyncs and renames it over `path`. Destroyed without commit(), it
// removes the temporary file. Blocking; throws std::runtime_error naming `path`.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void commit();

 private:
  [[noreturn]] void fail(const char* what, int err);

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  WrittenPages pages_{-1};
};

// For the many files of a directory that is made durable and moved into place as a whole
// (clusterize's staging directory: 10,000 node files): writes `bytes` to `path` with no fsync of
// its own; sync_filesystem_of() then flushes them all at once. Throws std::runtime_error naming
// the path.
void write_file_unsynced(const std::string& path, const std::string& bytes);
// syncfs(2) of the filesystem holding `path`; throws std::runtime_error naming it.
void sync_filesystem_of(const std::string& path);

std::string read_file(const std::string& path);  // throws ConfigError naming the path

}  // namespace ravnest::base
