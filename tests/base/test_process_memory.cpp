// libs/base/process_memory.h: /proc/self/status as the kernel writes it.
#include <catch2/catch.hpp>

#include <vector>

#include "libs/base/process_memory.h"

using ravnest::base::parse_proc_status;
using ravnest::base::read_process_memory;

TEST_CASE("parse_proc_status reads the resident figures in KiB") {
  const auto m = parse_proc_status(
      "Name:\travnestd\nVmPeak:\t 2000000 kB\nVmHWM:\t  178504 kB\nVmRSS:\t  162860 kB\n"
      "RssAnon:\t   58644 kB\nRssFile:\t  104216 kB\nRssShmem:\t       0 kB\nThreads:\t2\n");
  CHECK(m.peak_resident_bytes == 178504LL * 1024);
  CHECK(m.resident_bytes == 162860LL * 1024);
  CHECK(m.anonymous_bytes == 58644LL * 1024);
  CHECK(m.file_bytes == 104216LL * 1024);
}

TEST_CASE("parse_proc_status leaves what it lacks or cannot read at 0") {
  const auto m = parse_proc_status("VmRSS:\tlots kB\nVmHWM:\t-5 kB\nnonsense\n\n:\n");
  CHECK(m.resident_bytes == 0);
  CHECK(m.peak_resident_bytes == 0);
  CHECK(parse_proc_status("").resident_bytes == 0);
}

TEST_CASE("read_process_memory sees memory this process touches, and the peak resets") {
  ravnest::base::return_freed_memory_to_kernel();
  const auto before = read_process_memory();
  REQUIRE(before.resident_bytes > 0);
  REQUIRE(before.peak_resident_bytes >= before.resident_bytes);
  {
    std::vector<char> block(64 << 20, 1);  // 64 MiB, touched
    const auto during = read_process_memory();
    CHECK(during.resident_bytes >= before.resident_bytes + (60 << 20));
    CHECK(block[12345] == 1);
  }
  // Freed through its own mapping: back to the kernel.
  const auto after = read_process_memory();
  CHECK(after.resident_bytes < before.resident_bytes + (16 << 20));
  CHECK(after.peak_resident_bytes >= before.resident_bytes + (60 << 20));
  if (ravnest::base::reset_peak_resident()) {
    CHECK(read_process_memory().peak_resident_bytes < before.resident_bytes + (16 << 20));
  }
}
