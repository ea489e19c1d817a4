// ProcessMemory: what the kernel says this process holds (/proc/self/status), and the allocation
// policy that makes it follow what the process uses. Pure C++ (no LibTorch): the daemon reports
// and checks it, clusterize's memory probe measures with it (docs/planner.md#memory).
#pragma once

#include <cstdint>
#include <string>

namespace ravnest::base {

struct ProcessMemory {
  int64_t resident_bytes = 0;       // VmRSS
  int64_t peak_resident_bytes = 0;  // VmHWM: since the start, or since reset_peak_resident()
  int64_t anonymous_bytes = 0;      // RssAnon (heap, tensors)
  int64_t file_bytes = 0;           // RssFile (mapped libraries and files)
};

// Parses the text of /proc/<pid>/status; fields it lacks stay 0.
ProcessMemory parse_proc_status(const std::string& text);

// This process's figures now; all 0 where /proc cannot be read.
ProcessMemory read_process_memory();

// Sets VmHWM back to VmRSS (writes "5" to /proc/self/clear_refs, Linux 4.0 and later). False
// where the kernel refuses: the peak then keeps counting from the process's start.
bool reset_peak_resident();

// glibc raises its mmap threshold (up to 32 MiB) each time a large block is freed, after which
// blocks that size come from the heap and stay resident when freed: a process that trained once
// keeps its peak as RSS, and two runs of the same stage reach different peaks. Fixing the
// threshold at 128 KiB keeps every tensor above it in its own mapping, returned to the kernel on
// free, so the resident peak is the peak of what is live. Call once, early, before threads.
void return_freed_memory_to_kernel();

}  // namespace ravnest::base
