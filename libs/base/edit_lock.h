// EditLock: an exclusive flock on the directory `dir` itself (no file is created), held from
// construction to destruction around a command's read-modify-write of the files in `dir`
// (plan.json and the node files of a plan directory, a pool file): two commands at the same moment (`ravnest join`, `ravnest pool
// add/remove`) then run one after the other, the second reading what the first wrote, instead of
// both writing from the same old text and one edit being lost. The kernel releases the lock when
// the process dies, so a killed command never leaves it held.
//
// Blocks until the lock is free. Throws std::runtime_error, one line naming `dir`, when it cannot
// be opened or locked (a missing `dir` included: nothing is created). Any thread; not
// reentrant within one process (a second EditLock of the same directory waits for the first).
#pragma once

#include <filesystem>

namespace ravnest::base {

class EditLock {
 public:
  explicit EditLock(const std::filesystem::path& dir);
  ~EditLock();
  EditLock(const EditLock&) = delete;
  EditLock& operator=(const EditLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ravnest::base
