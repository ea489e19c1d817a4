#include "libs/base/process_memory.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "libs/base/read_all.h"

namespace ravnest::base {

ProcessMemory parse_proc_status(const std::string& text) {
  ProcessMemory memory;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    int64_t* field = key == "VmRSS"     ? &memory.resident_bytes
                     : key == "VmHWM"   ? &memory.peak_resident_bytes
                     : key == "RssAnon" ? &memory.anonymous_bytes
                     : key == "RssFile" ? &memory.file_bytes
                                        : nullptr;
    if (field == nullptr) continue;
    // "VmRSS:	  162860 kB": kilobytes of 1024 bytes.
    char* end = nullptr;
    const long long kib = std::strtoll(line.c_str() + colon + 1, &end, 10);
    if (end == line.c_str() + colon + 1 || kib < 0) continue;
    *field = static_cast<int64_t>(kib) * 1024;
  }
  return memory;
}

ProcessMemory read_process_memory() {
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  read_all(fd, &text, 1 << 20);
  ::close(fd);
  return parse_proc_status(text);
}

bool reset_peak_resident() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

void return_freed_memory_to_kernel() {
  // Setting M_MMAP_THRESHOLD also turns glibc's dynamic adjustment off; M_TRIM_THRESHOLD returns
  // the heap's free top beyond it.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}

}  // namespace ravnest::base
