// MemoryCgroup: a memory cgroup of its own with a byte limit, made for a test and removed after
// it, to check from outside what a process really charges (issue 29: every daemon in a cgroup
// of exactly the RAM its pool entry declares).
//
// Where: a child of this process's own memory cgroup (so that whatever limits this process
// limits the test's cgroups too), else of the hierarchy's root. cgroup v1 (memory controller
// mounted on its own: memory.limit_in_bytes, memory.max_usage_in_bytes, memory.oom_control) and
// v2 (memory.max, memory.peak, memory.events; the parent must have or get "memory" in its
// cgroup.subtree_control) are both handled. Swap is limited too where the kernel offers it
// (v1: memory.memsw.limit_in_bytes = the limit; v2: memory.swap.max = 0), so that swapping
// cannot hide a process's overuse.
//
// What is charged: every page a process in the cgroup allocates or first reads from a file
// after it joined; a process moved in later leaves its earlier charges behind (v1), so a process
// to be measured must join before it executes (LocalDaemons::set_cgroup_procs_file). Pages of a
// file already cached (a shared library this process loaded first) stay charged where they were.
//
// Needs root (or a delegated hierarchy); unavailable_reason() says whether this machine allows
// it, and tests that need it skip with that reason where it does not.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ravnest::test {

class MemoryCgroup {
 public:
  // Empty when memory cgroups can be made here (one was made and removed, once per process);
  // else one line saying why not, for a test to skip with.
  static std::string unavailable_reason();

  // A new cgroup "ravnest-test-<pid>-<n>" limited to `limit_bytes` (the kernel keeps whole
  // pages: limit_bytes() says what is in force). Throws std::runtime_error naming the file that
  // failed.
  explicit MemoryCgroup(int64_t limit_bytes);
  // Kills every process still in it (SIGKILL), waits for them to leave (a few seconds at most)
  // and removes it. Processes that are this process's children are left to their owner to reap
  // (a zombie is no longer in the cgroup). Never throws.
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool v2() const { return v2_; }
  // The file a process writes a pid into to join: see LocalDaemons::set_cgroup_procs_file.
  std::string procs_file() const { return (path_ / "cgroup.procs").string(); }

  // Moves a running process in. Only what it charges from now on is charged here.
  void add(pid_t pid);
  std::vector<pid_t> pids() const;

  int64_t limit_bytes() const;
  int64_t usage_bytes() const;  // now
  int64_t peak_bytes() const;   // the highest usage since the cgroup was made
  // Processes the kernel's OOM killer killed in this cgroup; -1 where the kernel does not count
  // them (v1 before Linux 4.13: see failcnt()).
  int64_t oom_kills() const;
  // How often usage hit the limit (v1 memory.failcnt + memory.memsw.failcnt, v2 memory.events
  // "max"); reclaiming page cache counts too, so a non-zero count alone is no OOM. Linux 6.18
  // with v1 was seen to leave both at 0 through an OOM kill: prefer oom_kills().
  int64_t failcnt() const;

 private:
  std::filesystem::path path_;
  bool v2_ = false;
};

}  // namespace ravnest::test
