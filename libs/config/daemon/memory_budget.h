// MemoryBudget: how much memory this daemon may use, where that figure comes from, and how much
// it uses now (docs/daemon.md#memory). Pure C++ (no LibTorch, no capnp).
//
// The budget is the smallest of: the config's memory_limit, the limit of the memory cgroup this
// process runs in (cgroup v1's memory.limit_in_bytes, v2's memory.max, the smallest along the
// path up to the hierarchy's mount: a parent's limit binds its children), and the machine's
// MemTotal. Each comes with its name, which every message about the budget repeats.
//
// Used bytes: where the budget is a cgroup's limit, the cgroup's usage less its inactive file
// pages (page cache the kernel drops before it reclaims anything else: what it would not
// count against the limit when it must make room); the peak is the cgroup's max usage (v1
// memory.max_usage_in_bytes, v2 memory.peak where the kernel has it, else VmHWM). Otherwise the
// daemon's own VmRSS and VmHWM: a memory_limit bounds this daemon, and MemTotal is the machine's,
// which other processes share.
//
// The parsers take the files' text; the readers take the root of the tree they read ("/"; a
// test's temporary directory holding proc/self/cgroup, proc/self/mountinfo, proc/self/status,
// proc/meminfo and the cgroup files under the mount points mountinfo names).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libs/base/process_memory.h"

namespace ravnest::config {

// Where this process sits in the memory controller's hierarchy (/proc/self/cgroup).
struct CgroupPlace {
  int version = 0;   // 1: a line naming the memory controller; 2: the "0::" line
  std::string path;  // inside the hierarchy, e.g. "/system.slice/ravnestd.service"
};

// The line of the memory controller (cgroup v1) when there is one, else the "0::" line (v2);
// nullopt when neither is there.
std::optional<CgroupPlace> parse_proc_cgroup(const std::string& text);

// A mount of that hierarchy (/proc/self/mountinfo).
struct CgroupMount {
  std::string root;         // the hierarchy's path that is mounted, usually "/"
  std::string mount_point;  // e.g. "/sys/fs/cgroup/memory", octal escapes (\040) decoded
};

// v1: the first mount of type "cgroup" whose options name "memory"; v2: the first "cgroup2".
std::optional<CgroupMount> parse_cgroup_mount(const std::string& mountinfo, int version);

// The directory of `place` under `mount` (the mount point, then the place's path below the
// mount's root); nullopt when the place is outside what is mounted.
std::optional<std::string> cgroup_dir(const CgroupMount& mount, const CgroupPlace& place);

// A limit file: cgroup v2's "max", or v1's "unlimited" (a page-rounded INT64_MAX, anything from
// 2^62 up), give nullopt, as does text that is no number.
std::optional<int64_t> parse_cgroup_limit(const std::string& text);

// A key's value in memory.stat ("total_inactive_file 14311424"); nullopt when absent.
std::optional<int64_t> parse_memory_stat(const std::string& text, const std::string& key);

// MemTotal from /proc/meminfo, in bytes; 0 when absent.
int64_t parse_mem_total(const std::string& meminfo);
// Any line of /proc/meminfo in bytes ("MemAvailable"); 0 when absent.
int64_t parse_meminfo_bytes(const std::string& meminfo, const std::string& key);

// What the memory cgroup of this process says.
struct CgroupMemory {
  int version = 0;
  std::string dir;                // under the root read
  std::optional<int64_t> limit;   // the smallest limit from dir up to the mount; none: unlimited
  int64_t usage_bytes = 0;        // v1 memory.usage_in_bytes, v2 memory.current
  int64_t inactive_file_bytes = 0;  // memory.stat: v1 total_inactive_file, v2 inactive_file
  int64_t peak_bytes = 0;         // v1 memory.max_usage_in_bytes, v2 memory.peak; 0: none
};

// nullopt when /proc/self/cgroup, the mount or the cgroup's usage file cannot be read.
std::optional<CgroupMemory> read_cgroup_memory(const std::string& root = "/");

struct MemoryBudget {
  int64_t bytes = 0;   // 0: nothing known (no /proc)
  std::string source;  // "memory_limit", "cgroup memory.limit_in_bytes", "cgroup memory.max",
                       // "MemTotal"
  bool from_cgroup() const { return source.rfind("cgroup ", 0) == 0; }
};

// The smallest of those given (0 or nullopt: not given); on a tie the config's, then the
// cgroup's.
MemoryBudget choose_budget(int64_t memory_limit, const std::optional<CgroupMemory>& cgroup,
                           int64_t mem_total);

struct MemoryUse {
  int64_t used_bytes = 0;
  int64_t peak_bytes = 0;
};

// As the header says: the cgroup's figures where the budget is its limit, else the process's.
MemoryUse memory_use(const MemoryBudget& budget, const std::optional<CgroupMemory>& cgroup,
                     const base::ProcessMemory& process);

struct MemoryReading {
  MemoryBudget budget;
  MemoryUse use;
};

// Everything above, read now under `root` (the process's figures from root/proc/self/status).
// `memory_limit`: the config's, 0 for none. Never throws: what cannot be read is left out.
MemoryReading read_memory(int64_t memory_limit, const std::string& root = "/");

}  // namespace ravnest::config
