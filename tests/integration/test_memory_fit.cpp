// Issue 29, "a plan that fits on paper fits in the machine", checked from outside: every daemon
// runs in a memory cgroup of exactly the RAM its pool entry declares (tests/support/
// memory_cgroup.h), at the tightest pool clusterize accepts, for a transformer (gpt_mini) and a
// CNN (resnet18): the job ends, no daemon is killed, and each daemon's peak is at least 70 % of
// its limit (the plan is tight, not wasteful). A pool below what a stage needs is refused.
//
// Cases that need cgroups skip, passing, with a warning where they cannot be made; the model
// cases also where clusterize writes no estimates.peak_memory_bytes (plans from before that
// measurement). The harness case checks the cgroups, and a daemon started inside one, alone.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "libs/local/local_daemons.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/base/process_memory.h"
#include "libs/planner/cluster_plan.h"
#include "tests/support/memory_cgroup.h"
#include "tests/support/test_env.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// clusterize accepts a node when the measured peak of its stage times this margin fits the RAM
// the pool declares for it (docs/planner.md#memory).
const double kPlannerMargin = ravnest::planner::memory_margin();
// A tight plan wastes little of a node's RAM: each daemon's peak reaches this share of its
// cgroup's limit (issue 29).
constexpr double kTight = 0.70;
// How far the measured peak may be from the estimate (issue 29). Printed, not checked: the
// estimate is a daemon's peak resident bytes (VmHWM), which count the pages of its libraries;
// its cgroup is not charged for the pages another process read first (the test, the CLI, the
// other daemons: about 120 MB of LibTorch), but is for the page cache of the files the daemon
// writes (stages, checkpoints), which the kernel reclaims before it kills. Both are printed: the
// cgroup's peak and the daemon's own VmHWM, the estimate's measure.
constexpr double kEstimateTolerance = 0.15;
constexpr int kNodes = 3;

constexpr int64_t kMB = 1000 * 1000;  // the pool's unit is the GB of 10^9 bytes
constexpr int64_t kMiB = 1 << 20;

bool skip_without_cgroups() {
  const std::string reason = test::MemoryCgroup::unavailable_reason();
  if (reason.empty()) return false;
  WARN("skipped: " << reason);
  return true;
}

std::string mb(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / kMB);
  return text;
}

// --------------------------------------------------------------------------- a plain process

// Starts `args` in `group` before it executes: the child waits on a pipe until add() moved it.
pid_t start_in(test::MemoryCgroup& group, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int gate[2];
  REQUIRE(::pipe2(gate, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // async-signal-safe calls only: the test process has other threads
    ::close(gate[1]);
    char go = 0;
    if (::read(gate[0], &go, 1) != 1) ::_exit(126);  // the parent gave up
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(gate[0]);
  try {
    group.add(pid);
  } catch (...) {
    ::close(gate[1]);
    ::waitpid(pid, nullptr, 0);
    throw;
  }
  REQUIRE(::write(gate[1], "x", 1) == 1);
  ::close(gate[1]);
  return pid;
}

// The child's exit code, or 128 + the signal that ended it; -1 (and killed) after `seconds`.
int wait_child(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Python writing `bytes` of memory (every page touched, so charged), then exiting.
std::vector<std::string> allocating(int64_t bytes) {
  return {test::python(), "-c",
          "import time; b = b'\\x01' * " + std::to_string(bytes) + "; time.sleep(0.2)"};
}

// --------------------------------------------------------------------------- plans and daemons

std::string ravnest_binary() { return test::binary_dir() + "/apps/ravnest/ravnest"; }
std::string ravnestd_binary() { return test::binary_dir() + "/apps/ravnestd/ravnestd"; }

struct Model {
  std::string name;           // in tests/models/export_models.py
  std::string example_input;  // the batch the plan is measured on and the job trains with
  int batch_size = 0;
};

// Node i on 127.0.0.1:ports[i], every node declaring `ram_bytes`.
std::string pool_json(const std::vector<int>& ports, int64_t ram_bytes) {
  nlohmann::json pool = nlohmann::json::object();
  for (size_t i = 0; i < ports.size(); ++i) {
    pool[std::to_string(i)] = {
        {"IP", "127.0.0.1:" + std::to_string(ports[i])},
        {"benchmarks", {{"ram", static_cast<double>(ram_bytes) / 1e9}, {"bandwidth", 1000}}}};
  }
  return pool.dump(2) + "\n";
}

// `ravnest clusterize` of `model` for the pool of `ports` declaring `ram_bytes` each, into
// dir/out (the pool in dir/out.pool.json).
test::CommandResult clusterize(const Model& model, const fs::path& dir,
                               const std::vector<int>& ports, int64_t ram_bytes,
                               const std::string& out) {
  const fs::path pool = dir / (out + ".pool.json");
  test::write_text(pool, pool_json(ports, ram_bytes));
  return test::run_command("cd " + dir.string() + " && " + ravnest_binary() + " clusterize " +
                               test::model_files(model.name).model + " --nodes " + pool.string() +
                               " --example-input " + model.example_input + " --out " +
                               (dir / out).string() + " --schedule gpipe --micro-batches 2",
                           600);
}

// The plan's node files, of the nodes it placed (in node order).
std::vector<config::NodeMetadata> placed_nodes(const fs::path& plan) {
  std::vector<config::NodeMetadata> nodes;
  for (int id = 0; id < kNodes; ++id) {
    const fs::path file = plan / "nodes" / ("node_" + std::to_string(id) + ".json");
    if (fs::exists(file)) nodes.push_back(config::load_node_metadata(file.string()));
  }
  return nodes;
}

// The RAM of the tightest pool clusterize accepts for stages peaking at `peak` at most: the
// next whole MB above peak x the margin (strictly above, so that the GB the pool file holds,
// read back as a double, never falls below the product).
int64_t tight_ram(int64_t largest_peak) {
  // 3 % over the margin: two probes of one stage differ by a few %, and the second clusterize
  // measures again (a node exactly at the first measurement could lose its stage to noise).
  return (static_cast<int64_t>(static_cast<double>(largest_peak) * kPlannerMargin * 1.03) / kMB +
          1) *
         kMB;
}

std::string job_text(const Model& model) {
  const auto files = test::model_files(model.name);
  // Two epochs of the 16 samples: 4 Adam updates, a checkpoint after each (checkpoints take
  // memory too).
  return "[train]\nepochs = 2\nbatch_size = " + std::to_string(model.batch_size) +
         "\nmicro_batches = 2\nschedule = \"gpipe\"\nseed = 7\nsave_every = 1\n\n"
         "[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file + "\"\n\n"
         "[loss]\nname = \"" + files.loss + "\"\n\n"
         "[optimizer]\nname = \"adam\"\nlr = 0.001\n";
}

// The daemon's resident peak (VmHWM), as clusterize's probe measures it; 0 once it exited.
int64_t resident_peak(pid_t pid) {
  try {
    return base::parse_proc_status(test::read_text("/proc/" + std::to_string(pid) + "/status"))
        .peak_resident_bytes;
  } catch (const std::exception&) {
    return 0;
  }
}

std::string percent_off(int64_t measured, int64_t estimated) {
  if (estimated <= 0) return "";
  const double off = static_cast<double>(measured - estimated) / static_cast<double>(estimated);
  char text[48];
  std::snprintf(text, sizeof text, " (%+.1f %%%s)", 100 * off,
                std::abs(off) <= kEstimateTolerance ? "" : ", outside 15 %");
  return text;
}

std::string tail(const std::string& text, size_t chars = 1500) {
  return text.size() <= chars ? text : "..." + text.substr(text.size() - chars);
}

// Steps a-d of issue 29's check for one model; see the file's comment.
void check_fit(const Model& model) {
  if (skip_without_cgroups()) return;
  test::TempDir dir;
  std::vector<int> ports;
  for (int i = 0; i < kNodes; ++i) ports.push_back(local::free_loopback_port());

  // a, b: what each stage peaks at, measured by clusterize on a generous pool.
  auto generous = clusterize(model, dir.path(), ports, 8'000 * kMB, "plan_generous");
  INFO("clusterize (generous pool): " << generous.out << generous.err);
  REQUIRE(generous.exit_code == 0);
  int64_t largest = 0;
  for (const auto& node : placed_nodes(dir / "plan_generous")) {
    if (node.estimates.peak_memory_bytes <= 0) {
      WARN("skipped: clusterize measures no estimates.peak_memory_bytes (" << node.name
           << " of " << model.name << " has none): nothing to size the pool by");
      return;
    }
    largest = std::max(largest, node.estimates.peak_memory_bytes);
  }
  REQUIRE(largest > 0);

  // c: every node declares exactly what the largest stage needs; clusterize must accept it.
  const int64_t ram = tight_ram(largest);
  auto tight = clusterize(model, dir.path(), ports, ram, "plan");
  INFO("clusterize (every node " << mb(ram) << "): " << tight.out << tight.err);
  REQUIRE(tight.exit_code == 0);
  const auto nodes = placed_nodes(dir / "plan");
  REQUIRE(!nodes.empty());
  // The tightness below means something only for the plan the pool was sized by: the second
  // clusterize measures again, and a few % of noise can make another plan the better one.
  bool same_plan = nodes.size() == placed_nodes(dir / "plan_generous").size();
  {
    const auto first = placed_nodes(dir / "plan_generous");
    for (size_t i = 0; same_plan && i < nodes.size(); ++i) {
      same_plan = nodes[i].cluster_size == first[i].cluster_size &&
                  nodes[i].estimates.parameter_count == first[i].estimates.parameter_count;
    }
  }

  // d: one daemon per placed node, inside a cgroup of the node's RAM from its first allocation.
  test::write_text(dir / "secret", "memory-fit-" + std::to_string(::getpid()) + "\n");
  fs::permissions(dir / "secret", fs::perms::owner_read | fs::perms::owner_write);
  std::vector<std::unique_ptr<test::MemoryCgroup>> groups;  // outlive the daemons
  std::vector<std::string> names;
  std::vector<int> node_ports;
  for (const auto& node : nodes) {
    names.push_back(node.name);
    node_ports.push_back(ports.at(node.node_id));
  }
  local::LocalDaemons daemons(ravnestd_binary(), dir.path().string(),
                                (dir / "secret").string(), names, node_ports);
  for (size_t i = 0; i < nodes.size(); ++i) {
    groups.push_back(std::make_unique<test::MemoryCgroup>(ram));
    daemons.set_cgroup_procs_file(i, groups[i]->procs_file());
    daemons.set_flags(i, {"--threads", "1"});
  }
  daemons.start_all();
  const std::string connection =
      " --plan " + (dir / "plan").string() + " --secret-file " + (dir / "secret").string();
  auto push = test::run_command(ravnest_binary() + " push" + connection, 120);
  INFO("push: " << push.out << push.err);
  REQUIRE(push.exit_code == 0);
  test::write_text(dir / "job.toml", job_text(model));
  auto train = test::run_command(
      "cd " + dir.path().string() + " && " + ravnest_binary() + " train job.toml" + connection,
      300);
  std::string logs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    logs += "\n--- " + names[i] + " (" + mb(groups[i]->peak_bytes()) + " peak of " +
            mb(groups[i]->limit_bytes()) + ", " + std::to_string(groups[i]->oom_kills()) +
            " OOM kills):\n" + tail(test::read_text(daemons.log_path(i)));
  }
  INFO("train: " << tail(train.out) << train.err << logs);
  CHECK(train.exit_code == 0);

  // No daemon killed: each alive until stopped, none killed by the OOM killer, a clean exit.
  std::vector<int64_t> resident;
  for (size_t i = 0; i < nodes.size(); ++i) {
    INFO(names[i]);
    CHECK(daemons.running(i));
    CHECK(groups[i]->oom_kills() <= 0);
    resident.push_back(daemons.running(i) ? resident_peak(daemons.pid(i)) : 0);
  }
  for (size_t i = 0; i < nodes.size(); ++i) daemons.signal(i, SIGTERM);
  for (size_t i = 0; i < nodes.size(); ++i) {
    INFO(names[i]);
    CHECK(daemons.wait_exit(i, 15) == 0);
  }

  std::cout << "memory fit of " << model.name << " (" << nodes.size() << " daemons, every node "
            << mb(ram) << " = " << kPlannerMargin << " x the largest estimated peak "
            << mb(largest) << "):\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t estimated = nodes[i].estimates.peak_memory_bytes;
    const int64_t measured = groups[i]->peak_bytes();
    const int64_t limit = groups[i]->limit_bytes();
    std::cout << "  " << names[i] << ": estimated " << mb(estimated) << ", cgroup peak "
              << mb(measured) << percent_off(measured, estimated) << " = "
              << static_cast<int>(100.0 * measured / limit) << " % of its limit "
              << mb(limit) << ", daemon VmHWM " << mb(resident[i])
              << percent_off(resident[i], estimated) << "\n";
  }
  std::cout << std::flush;
  if (!same_plan) {
    WARN(model.name << ": the pool sized by the first plan got another plan (its stages measured "
                    "differently the second time); the share of RAM each daemon used is printed "
                    "above, not checked");
    return;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    INFO(names[i] << ": the plan leaves more than " << 100 * (1 - kTight)
                  << " % of the node's RAM unused");
    // The daemon's resident peak counts the library pages its cgroup may not be charged for
    // (another process read them first); the cgroup's counts the page cache of its files: the
    // larger of the two is what the node's RAM holds for it.
    CHECK(std::max(groups[i]->peak_bytes(), resident[i]) >= kTight * groups[i]->limit_bytes());
  }
}

}  // namespace

TEST_CASE("memory fit: harness, a process charged from its start, OOM-killed over its limit",
          "[memory]") {
  if (skip_without_cgroups()) return;
  {
    INFO("a process within its limit: the peak rises by what it wrote");
    test::MemoryCgroup group(256 * kMiB);
    CHECK(group.limit_bytes() == 256 * kMiB);
    CHECK(group.peak_bytes() < 16 * kMiB);
    const pid_t pid = start_in(group, allocating(96 * kMiB));
    CHECK(wait_child(pid, 60) == 0);
    CHECK(group.peak_bytes() >= 96 * kMiB);
    CHECK(group.peak_bytes() <= group.limit_bytes());
    CHECK(group.oom_kills() <= 0);
  }
  {
    INFO("a process over its limit: OOM-killed, and counted");
    test::MemoryCgroup group(64 * kMiB);
    const pid_t pid = start_in(group, allocating(256 * kMiB));
    CHECK(wait_child(pid, 60) == 128 + SIGKILL);
    // Where the kernel counts no OOM kills (-1), the limit's hits at least: some kernels (6.x
    // with v1) leave failcnt at 0 even then.
    if (group.oom_kills() >= 0) {
      CHECK(group.oom_kills() >= 1);
    } else {
      CHECK(group.failcnt() > 0);
    }
    CHECK(group.peak_bytes() <= group.limit_bytes());
    CHECK(group.peak_bytes() >= 0.9 * group.limit_bytes());
  }
  {
    INFO("removed with the processes still in it");
    fs::path where;
    pid_t pid = -1;
    {
      test::MemoryCgroup group(64 * kMiB);
      where = group.path();
      pid = start_in(group, {"/bin/sleep", "30"});
      CHECK(group.pids() == std::vector<pid_t>{pid});
    }
    CHECK_FALSE(fs::exists(where));
    CHECK(wait_child(pid, 10) == 128 + SIGKILL);
  }
  {
    INFO("a daemon started inside a cgroup: charged from its start");
    test::MemoryCgroup group(1000 * kMB);
    test::TempDir dir;
    test::write_text(dir / "secret", "memory-fit\n");
    fs::permissions(dir / "secret", fs::perms::owner_read | fs::perms::owner_write);
    local::LocalDaemons daemons(ravnestd_binary(), dir.path().string(),
                                  (dir / "secret").string(), {"node_0"});
    daemons.set_cgroup_procs_file(0, group.procs_file());
    daemons.set_flags(0, {"--threads", "1"});
    daemons.start(0);
    CHECK(group.pids() == std::vector<pid_t>{daemons.pid(0)});
    std::cout << "an idle ravnestd: " << mb(group.usage_bytes()) << " charged to its cgroup ("
              << mb(group.peak_bytes()) << " peak), resident peak (VmHWM) "
              << mb(resident_peak(daemons.pid(0))) << "\n" << std::flush;
    CHECK(group.usage_bytes() > 8 * kMB);  // its heap and stacks at least
    daemons.signal(0, SIGTERM);
    CHECK(daemons.wait_exit(0, 15) == 0);
    CHECK(group.oom_kills() <= 0);

    INFO("a cgroup it cannot join: start() says so");
    daemons.set_cgroup_procs_file(0, (dir / "no-such-cgroup" / "cgroup.procs").string());
    CHECK_THROWS_WITH(daemons.start(0), Catch::Contains("cannot join the cgroup"));
  }
}

TEST_CASE("memory fit: transformer at the tightest plan, in cgroups of the declared RAM",
          "[memory][daemon]") {
  check_fit({"gpt_mini", "8x32:int64:2048", 8});
}

TEST_CASE("memory fit: cnn at the tightest plan, in cgroups of the declared RAM",
          "[memory][daemon]") {
  check_fit({"resnet18", "8x3x64x64:float32", 8});
}

TEST_CASE("memory fit: refusal of a pool below what a stage needs", "[memory][cli]") {
  const Model model{"gpt_mini", "8x32:int64:2048", 8};
  test::TempDir dir;
  std::vector<int> free_ports;
  for (int i = 0; i < kNodes; ++i) free_ports.push_back(local::free_loopback_port());
  auto generous = clusterize(model, dir.path(), free_ports, 8'000 * kMB, "plan_generous");
  INFO("clusterize (generous pool): " << generous.out << generous.err);
  REQUIRE(generous.exit_code == 0);
  int64_t smallest = 0, baseline = 0;
  for (const auto& node : placed_nodes(dir / "plan_generous")) {
    if (node.estimates.peak_memory_bytes <= 0) {
      WARN("skipped: clusterize measures no estimates.peak_memory_bytes (" << node.name
           << " of " << model.name << " has none): nothing to refuse by");
      return;
    }
    smallest = smallest == 0 ? node.estimates.peak_memory_bytes
                             : std::min(smallest, node.estimates.peak_memory_bytes);
    baseline = std::max(baseline, node.estimates.daemon_baseline_bytes);
  }
  // What an idle daemon holds by itself: no stage fits there, however the model is cut.
  const int64_t ram = (baseline > 0 ? baseline : smallest / 2) / kMB * kMB;
  auto refused = clusterize(model, dir.path(), free_ports, ram, "plan");
  INFO("clusterize (every node " << mb(ram) << "): " << refused.out << refused.err);
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("node_") != std::string::npos);
  CHECK(std::count(refused.err.begin(), refused.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "plan" / "plan.json"));
}
