// libs/base/byte_size.h, memory_budget.h and memory_checks.h: sizes as written, the memory
// cgroup's files of both versions as the kernel writes them (fixtures, and fake trees in a
// temporary directory), the budget's choice, the check at push and the warning's state machine.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "libs/base/byte_size.h"
#include "libs/config/daemon/memory_budget.h"
#include "libs/config/daemon/memory_checks.h"
#include "tests/support/test_env.h"

using namespace ravnest;
using namespace ravnest::config;
using namespace ravnest::base;
namespace fs = std::filesystem;

namespace {

// This machine's kind of /proc/self/cgroup (cgroup v1 with a unified line) and mountinfo.
const char* const kCgroupV1 =
    "9:name=systemd:/\n8:pids:/\n5:devices:/\n4:memory:/process_api/a790e4\n"
    "3:cpuset:/\n2:cpuacct:/\n1:cpu,cpuacct:/\n0::/\n";
const char* const kMountinfoV1 =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
// A systemd host with cgroup v2 only.
const char* const kCgroupV2 = "0::/system.slice/ravnestd.service\n";
const char* const kMountinfoV2 =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

// A temporary directory standing for "/": files written below it, their directories made.
struct FakeTree {
  ravnest::test::TempDir dir;
  fs::path root = dir.path();
  void write(const std::string& path, const std::string& text) const {
    const fs::path file = root / path.substr(1);
    fs::create_directories(file.parent_path());
    ravnest::test::write_text(file, text);
  }
};

}  // namespace

TEST_CASE("byte sizes: read with units of both powers, written in powers of 1000",
          "[config][memory]") {
  CHECK(base::parse_byte_size("629145600") == 629145600);
  CHECK(parse_byte_size("600MiB") == 600LL << 20);
  CHECK(parse_byte_size("600 mib") == 600LL << 20);
  CHECK(parse_byte_size("1.4GB") == 1400000000);
  CHECK(parse_byte_size("1.5KiB") == 1536);
  CHECK(parse_byte_size("2kB") == 2000);
  CHECK(parse_byte_size("3TiB") == 3LL << 40);
  CHECK(parse_byte_size("7B") == 7);
  CHECK(parse_byte_size("0.0001KB") == 0);  // a fraction of a byte is dropped
  CHECK(parse_byte_size("0") == 0);         // the caller says whether 0 is allowed
  CHECK(parse_byte_size("9223372036854775807") == INT64_MAX);
  std::string why;
  CHECK_FALSE(parse_byte_size("9223372036854775808", &why));
  CHECK(why == "is more than 9223372036854775807 bytes");
  CHECK_FALSE(parse_byte_size("8EiB"));
  CHECK_FALSE(parse_byte_size("1400M", &why));
  CHECK(why == "has a unit that says neither power: write MB for powers of 1000 or MiB for "
               "powers of 1024");
  for (const char* bad : {"", " 5", "-5", "+5", "5.", ".5", "1.5", "5 ", "5  MB", "5MBs", "5 Mb/s",
                          "five", "1e3"}) {
    INFO(bad);
    CHECK_FALSE(parse_byte_size(bad, &why));
    CHECK(why.find("is not a size") == 0);
  }
  CHECK(base::format_bytes(0) == "0 B");
  CHECK(format_bytes(950) == "950 B");
  CHECK(format_bytes(652000000) == "652 MB");
  CHECK(format_bytes(629145600) == "629 MB");
  CHECK(format_bytes(1400000000) == "1.40 GB");
}

TEST_CASE("/proc/self/cgroup: the memory controller's line, else the unified one",
          "[config][memory]") {
  auto v1 = parse_proc_cgroup(kCgroupV1);
  REQUIRE(v1);
  CHECK(v1->version == 1);
  CHECK(v1->path == "/process_api/a790e4");
  auto v2 = parse_proc_cgroup(kCgroupV2);
  REQUIRE(v2);
  CHECK(v2->version == 2);
  CHECK(v2->path == "/system.slice/ravnestd.service");
  // Comounted controllers, and a path that holds ':'.
  auto comounted = parse_proc_cgroup("6:cpu,memory,blkio:/a:b/c\n0::/ignored\n");
  REQUIRE(comounted);
  CHECK(comounted->version == 1);
  CHECK(comounted->path == "/a:b/c");
  CHECK_FALSE(parse_proc_cgroup(""));
  CHECK_FALSE(parse_proc_cgroup("4:cpu:/x\ngarbage\n1:name=memory:/y\n"));
}

TEST_CASE("mountinfo: the memory hierarchy's mount, and the cgroup's directory under it",
          "[config][memory]") {
  auto v1 = parse_cgroup_mount(kMountinfoV1, 1);
  REQUIRE(v1);
  CHECK(v1->mount_point == "/sys/fs/cgroup/memory");
  CHECK(v1->root == "/");
  auto v2 = parse_cgroup_mount(kMountinfoV2, 2);
  REQUIRE(v2);
  CHECK(v2->mount_point == "/sys/fs/cgroup");
  CHECK_FALSE(parse_cgroup_mount(kMountinfoV2, 1));
  CHECK_FALSE(parse_cgroup_mount("", 2));
  CHECK_FALSE(parse_cgroup_mount("short line\n35 31 0:32 / /m rw - cgroup\n", 1));
  // A mount point with a space, as the kernel escapes it.
  auto spaced = parse_cgroup_mount("40 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n", 2);
  REQUIRE(spaced);
  CHECK(spaced->mount_point == "/mnt/cg two");

  CHECK(cgroup_dir({"/", "/sys/fs/cgroup/memory"}, {1, "/process_api/a790e4"}) ==
        "/sys/fs/cgroup/memory/process_api/a790e4");
  CHECK(cgroup_dir({"/", "/sys/fs/cgroup"}, {2, "/"}) == "/sys/fs/cgroup");
  // A container that sees its own cgroup mounted: the mount's root is the cgroup's path.
  CHECK(cgroup_dir({"/docker/abc", "/sys/fs/cgroup/memory"}, {1, "/docker/abc"}) ==
        "/sys/fs/cgroup/memory");
  CHECK(cgroup_dir({"/docker/abc", "/sys/fs/cgroup/memory"}, {1, "/docker/abc/job"}) ==
        "/sys/fs/cgroup/memory/job");
  CHECK_FALSE(cgroup_dir({"/docker/abc", "/sys/fs/cgroup/memory"}, {1, "/docker/abcd"}));
}

TEST_CASE("cgroup files: limits, memory.stat, meminfo", "[config][memory]") {
  CHECK(parse_cgroup_limit("629145600\n") == 629145600);
  CHECK_FALSE(parse_cgroup_limit("max\n"));                   // v2: none
  CHECK_FALSE(parse_cgroup_limit("9223372036854771712\n"));   // v1: none
  CHECK_FALSE(parse_cgroup_limit("18446744073709551615\n"));  // beyond INT64_MAX
  CHECK_FALSE(parse_cgroup_limit(""));
  CHECK_FALSE(parse_cgroup_limit("12 MB"));
  const char* stat_v1 = "cache 11472896\ninactive_file 4096\ntotal_inactive_file 14311424\n";
  CHECK(parse_memory_stat(stat_v1, "total_inactive_file") == 14311424);
  CHECK(parse_memory_stat(stat_v1, "inactive_file") == 4096);
  CHECK_FALSE(parse_memory_stat(stat_v1, "inactive_anon"));
  CHECK(parse_mem_total("MemTotal:       24684084 kB\nMemFree: 1 kB\n") == 24684084LL * 1024);
  CHECK(parse_mem_total("MemFree: 1 kB\n") == 0);
}

TEST_CASE("read_cgroup_memory: a v1 tree, limits of the cgroup and its parent",
          "[config][memory]") {
  FakeTree tree;
  tree.write("/proc/self/cgroup", "4:memory:/jobs/node_2\n0::/\n");
  tree.write("/proc/self/mountinfo", kMountinfoV1);
  const std::string dir = "/sys/fs/cgroup/memory/jobs/node_2";
  tree.write(dir + "/memory.usage_in_bytes", "500000000\n");
  tree.write(dir + "/memory.max_usage_in_bytes", "560000000\n");
  tree.write(dir + "/memory.stat", "cache 1\ntotal_inactive_file 20000000\n");
  tree.write(dir + "/memory.limit_in_bytes", "9223372036854771712\n");
  tree.write("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "629145600\n");
  tree.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");

  auto memory = read_cgroup_memory(tree.root.string());
  REQUIRE(memory);
  CHECK(memory->version == 1);
  CHECK(memory->dir == dir);
  CHECK(memory->limit == 629145600);  // the parent's
  CHECK(memory->usage_bytes == 500000000);
  CHECK(memory->inactive_file_bytes == 20000000);
  CHECK(memory->peak_bytes == 560000000);

  // The cgroup's own limit, when smaller.
  tree.write(dir + "/memory.limit_in_bytes", "524288000\n");
  CHECK(read_cgroup_memory(tree.root.string())->limit == 524288000);

  tree.write("/proc/self/status", "VmHWM:\t  300000 kB\nVmRSS:\t  200000 kB\n");
  tree.write("/proc/meminfo", "MemTotal:       24684084 kB\n");
  auto reading = read_memory(0, tree.root.string());
  CHECK(reading.budget.bytes == 524288000);
  CHECK(reading.budget.source == "cgroup memory.limit_in_bytes");
  CHECK(reading.use.used_bytes == 480000000);  // usage less inactive file pages
  CHECK(reading.use.peak_bytes == 560000000);
  // A smaller memory_limit: the budget is the daemon's own, and so are its figures.
  reading = read_memory(400 << 20, tree.root.string());
  CHECK(reading.budget.bytes == 400 << 20);
  CHECK(reading.budget.source == "memory_limit");
  CHECK(reading.use.used_bytes == 200000LL * 1024);
  CHECK(reading.use.peak_bytes == 300000LL * 1024);
}

TEST_CASE("read_cgroup_memory: a v2 tree, memory.max and memory.peak", "[config][memory]") {
  FakeTree tree;
  tree.write("/proc/self/cgroup", kCgroupV2);
  tree.write("/proc/self/mountinfo", kMountinfoV2);
  tree.write("/proc/self/status", "VmHWM:\t  300000 kB\nVmRSS:\t  200000 kB\n");
  tree.write("/proc/meminfo", "MemTotal:       1000000 kB\n");
  const std::string dir = "/sys/fs/cgroup/system.slice/ravnestd.service";
  tree.write(dir + "/memory.current", "400000000\n");
  tree.write(dir + "/memory.stat", "anon 1\nfile 2\ninactive_file 50000000\nactive_file 3\n");
  tree.write(dir + "/memory.max", "max\n");
  tree.write("/sys/fs/cgroup/system.slice/memory.max", "max\n");

  auto memory = read_cgroup_memory(tree.root.string());
  REQUIRE(memory);
  CHECK(memory->version == 2);
  CHECK_FALSE(memory->limit);
  CHECK(memory->peak_bytes == 0);  // no memory.peak on this kernel
  // No limit anywhere: MemTotal, and the daemon's own figures.
  auto reading = read_memory(0, tree.root.string());
  CHECK(reading.budget.bytes == 1000000LL * 1024);
  CHECK(reading.budget.source == "MemTotal");
  CHECK(reading.use.used_bytes == 200000LL * 1024);

  tree.write(dir + "/memory.max", "629145600\n");
  tree.write(dir + "/memory.peak", "450000000\n");
  reading = read_memory(0, tree.root.string());
  CHECK(reading.budget.bytes == 629145600);
  CHECK(reading.budget.source == "cgroup memory.max");
  CHECK(reading.use.used_bytes == 350000000);
  CHECK(reading.use.peak_bytes == 450000000);
  // Without memory.peak, the process's VmHWM stands in.
  fs::remove(tree.root / dir.substr(1) / "memory.peak");
  CHECK(read_memory(0, tree.root.string()).use.peak_bytes == 300000LL * 1024);
}

TEST_CASE("read_cgroup_memory: missing files", "[config][memory]") {
  FakeTree tree;
  CHECK_FALSE(read_cgroup_memory(tree.root.string()));  // no /proc at all
  auto nothing = read_memory(0, tree.root.string());
  CHECK(nothing.budget.bytes == 0);
  CHECK(nothing.use.used_bytes == 0);
  tree.write("/proc/self/cgroup", kCgroupV2);
  CHECK_FALSE(read_cgroup_memory(tree.root.string()));  // no mountinfo
  tree.write("/proc/self/mountinfo", kMountinfoV1);       // no cgroup2 mount
  CHECK_FALSE(read_cgroup_memory(tree.root.string()));
  tree.write("/proc/self/mountinfo", kMountinfoV2);       // mounted, but no usage file
  CHECK_FALSE(read_cgroup_memory(tree.root.string()));
  // Only the usage file: no limit, no inactive pages, no peak.
  tree.write("/sys/fs/cgroup/system.slice/ravnestd.service/memory.current", "7\n");
  auto memory = read_cgroup_memory(tree.root.string());
  REQUIRE(memory);
  CHECK(memory->usage_bytes == 7);
  CHECK_FALSE(memory->limit);
  CHECK(memory->inactive_file_bytes == 0);
  tree.write("/proc/meminfo", "MemTotal: 2 kB\n");
  CHECK(read_memory(0, tree.root.string()).budget.source == "MemTotal");
}

TEST_CASE("this process: a budget from somewhere, used bytes above zero", "[config][memory]") {
  const auto reading = read_memory(0);
  INFO(reading.budget.source);
  CHECK(reading.budget.bytes > 0);
  CHECK(reading.use.used_bytes > 0);
  CHECK(read_memory(1 << 20).budget.source == "memory_limit");
}

TEST_CASE("the budget: the smallest of memory_limit, the cgroup's limit and MemTotal",
          "[config][memory]") {
  CgroupMemory v1;
  v1.version = 1;
  v1.limit = 600;
  CgroupMemory v2 = v1;
  v2.version = 2;
  CHECK(choose_budget(0, v1, 1000).source == "cgroup memory.limit_in_bytes");
  CHECK(choose_budget(0, v2, 1000).source == "cgroup memory.max");
  CHECK(choose_budget(0, v2, 1000).bytes == 600);
  CHECK(choose_budget(500, v1, 1000).source == "memory_limit");
  CHECK(choose_budget(600, v1, 1000).source == "memory_limit");  // a tie: the config's
  CHECK(choose_budget(700, v1, 1000).source == "cgroup memory.limit_in_bytes");
  CHECK(choose_budget(0, v1, 500).source == "MemTotal");
  CgroupMemory unlimited;
  unlimited.version = 1;
  CHECK(choose_budget(0, unlimited, 1000).source == "MemTotal");
  CHECK(choose_budget(2000, std::nullopt, 1000).source == "MemTotal");
  CHECK(choose_budget(2000, std::nullopt, 0).source == "memory_limit");
  CHECK(choose_budget(0, std::nullopt, 0).bytes == 0);
  CHECK(choose_budget(0, std::nullopt, 0).source.empty());

  // Used bytes: the cgroup's when the budget is its limit, the process's otherwise.
  v1.usage_bytes = 500;
  v1.inactive_file_bytes = 100;
  v1.peak_bytes = 550;
  base::ProcessMemory process;
  process.resident_bytes = 300;
  process.peak_resident_bytes = 350;
  auto use = memory_use(choose_budget(0, v1, 1000), v1, process);
  CHECK(use.used_bytes == 400);
  CHECK(use.peak_bytes == 550);
  use = memory_use(choose_budget(500, v1, 1000), v1, process);
  CHECK(use.used_bytes == 300);
  CHECK(use.peak_bytes == 350);
  v1.inactive_file_bytes = 900;  // more inactive than used (read at different moments): none
  CHECK(memory_use(choose_budget(0, v1, 1000), v1, process).used_bytes == 0);
}

TEST_CASE("at push: a stage's measured need against the budget", "[config][memory]") {
  StageEstimates estimates;
  MemoryBudget budget{600000000, "cgroup memory.limit_in_bytes"};
  // Not measured: nothing to check.
  CHECK_FALSE(stage_memory_refusal(estimates, 163000000, budget));
  estimates.peak_memory_bytes = 652000000;
  estimates.daemon_baseline_bytes = 163000000;
  const auto need = stage_memory_need(estimates, 163000000);
  CHECK(need.stage_bytes == 489000000);
  CHECK(need.total() == 652000000);
  const auto refusal = stage_memory_refusal(estimates, 163000000, budget);
  REQUIRE(refusal);
  CHECK(*refusal ==
        "the stage needs 652 MB at its peak (489 MB measured for the stage by clusterize, 163 MB "
        "this daemon's own), more than this daemon's memory budget of 600 MB (cgroup "
        "memory.limit_in_bytes); not stored");
  // This daemon's own baseline replaces clusterize's: a leaner daemon fits.
  CHECK_FALSE(stage_memory_refusal(estimates, 100000000, budget));
  CHECK(stage_memory_need(estimates, 100000000).total() == 589000000);
  // Exactly the budget fits.
  CHECK_FALSE(stage_memory_refusal(estimates, 111000000, budget));
  CHECK(stage_memory_refusal(estimates, 111000001, budget));
  // No budget known: no refusal.
  CHECK_FALSE(stage_memory_refusal(estimates, 163000000, MemoryBudget{}));
  // Huge figures saturate instead of wrapping.
  estimates.peak_memory_bytes = INT64_MAX;
  estimates.daemon_baseline_bytes = 0;
  CHECK(stage_memory_need(estimates, INT64_MAX).total() == INT64_MAX);
  CHECK(stage_memory_refusal(estimates, INT64_MAX, budget));
}

TEST_CASE("at push on a GPU: a stage's measured peak on the card against the card",
          "[config][memory]") {
  StageEstimates estimates;
  // Not measured on a GPU, or the card's size unknown: nothing to check.
  CHECK_FALSE(stage_device_memory_refusal(estimates, "cuda:0", 8000000000));
  estimates.device_peak_memory_bytes = 9100000000;
  CHECK_FALSE(stage_device_memory_refusal(estimates, "cuda:0", 0));
  const auto refusal = stage_device_memory_refusal(estimates, "cuda:0", 8000000000);
  REQUIRE(refusal);
  CHECK(*refusal ==
        "the stage needs 9.10 GB of cuda:0 at its peak (measured by clusterize, the CUDA context "
        "included), more than its 8.00 GB; not stored");
  // Exactly the card fits; the host's figures play no part.
  CHECK_FALSE(stage_device_memory_refusal(estimates, "cuda:0", 9100000000));
  estimates.peak_memory_bytes = INT64_MAX;
  CHECK_FALSE(stage_device_memory_refusal(estimates, "cuda:0", 9100000000));
}

TEST_CASE("while a job runs: one warning at 90 %, re-armed below 80 %", "[config][memory]") {
  const int64_t budget = 1000;
  auto step = step_memory_alarm(899, budget, true);
  CHECK_FALSE(step.warn);
  CHECK(step.armed);
  step = step_memory_alarm(900, budget, true);
  CHECK(step.warn);
  CHECK_FALSE(step.armed);
  // Above, and between the lines: said once.
  for (int64_t used : {950, 1200, 850, 800, 901}) {
    INFO(used);
    step = step_memory_alarm(used, budget, step.armed);
    CHECK_FALSE(step.warn);
    CHECK_FALSE(step.armed);
  }
  step = step_memory_alarm(799, budget, step.armed);  // below 80 %: re-armed, not said
  CHECK_FALSE(step.warn);
  CHECK(step.armed);
  step = step_memory_alarm(930, budget, step.armed);
  CHECK(step.warn);
  // No budget: never.
  CHECK_FALSE(step_memory_alarm(INT64_MAX, 0, true).warn);
  // Large figures do not overflow.
  CHECK(step_memory_alarm(INT64_MAX, INT64_MAX, true).warn);
  CHECK_FALSE(step_memory_alarm(INT64_MAX / 2, INT64_MAX, true).warn);

  const MemoryBudget b{600000000, "cgroup memory.limit_in_bytes"};
  CHECK(memory_warning_message("node_2", 558000000, b) ==
        "node_2: memory at 93 % of its budget (558 MB of 600 MB, cgroup memory.limit_in_bytes)");
  CHECK(memory_warning_message("node_2", 539999999, b).find("at 89 %") != std::string::npos);
}
