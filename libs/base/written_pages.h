// WrittenPages: a file being written without its pages staying in memory. In a memory cgroup
// the page cache of the files a process writes is charged to it, and dirty pages cannot be
// dropped before they reach the disk (cgroup v1 does not even throttle a cgroup's writers on its
// own dirty pages): a daemon writing a checkpoint of hundreds of MB at once can be pushed over
// its limit by its own file. Every kWindow bytes, what was written is sent to the disk, waited
// for and dropped from the cache; release_all() drops the whole file's pages after its fsync.
// Failures of these hints are ignored: they change memory, never the file.
#pragma once

#include <cstdint>

namespace ravnest::base {

class WrittenPages {
 public:
  static constexpr uint64_t kWindow = uint64_t{8} << 20;

  explicit WrittenPages(int fd) : fd_(fd) {}
  // After `bytes` more were written at the end of the file. Blocks on the disk every kWindow.
  void wrote(uint64_t bytes);
  // After fsync: the file's clean pages leave the cache.
  void release_all();

 private:
  int fd_;
  uint64_t written_ = 0;
  uint64_t released_ = 0;
};

}  // namespace ravnest::base
