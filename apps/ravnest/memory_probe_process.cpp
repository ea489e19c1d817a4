#include "apps/ravnest/memory_probe_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "libs/base/atomic_file.h"
#include "libs/base/process_memory.h"
#include "libs/training/training_device.h"
#include "libs/training/device_memory.h"
#include "libs/training/memory_probe.h"

extern char** environ;

namespace ravnest::cli {

namespace {

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const auto at = t.rfind('\n');
  return at == std::string::npos ? t : t.substr(at + 1);
}

}  // namespace

graph::MemoryProbe process_memory_probe(int timeout_seconds) {
  return [timeout_seconds](const graph::StageProbe& probe) {
    namespace fs = std::filesystem;
    const std::string scratch_dir = fs::path(probe.inputs_path).parent_path().string();
    static int serial = 0;
    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(++serial);
    const std::string result_path = (fs::path(scratch_dir) / ("probe-" + tag + ".json")).string();
    const std::string log_path = (fs::path(scratch_dir) / ("probe-" + tag + ".log")).string();
    std::vector<std::string> args = {"ravnest",      "probe-memory", "--stage",
                                     probe.stage_path, "--inputs",   probe.inputs_path,
                                     "--scratch",    scratch_dir,    "--result",
                                     result_path,    "--in-flight",  std::to_string(probe.in_flight),
                                     "--stash",      std::to_string(probe.stash_versions)};
    if (probe.root) args.push_back("--root");
    if (probe.leaf) args.push_back("--leaf");
    if (probe.ring) args.push_back("--ring");
    if (!probe.device.empty() && probe.device != "cpu") {
      args.push_back("--device");
      args.push_back(probe.device);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw std::runtime_error(probe.stage_path + ": cannot start the memory probe: " +
                               std::strerror(rc));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    int status = 0;
    for (;;) {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        throw std::runtime_error(probe.stage_path + ": the memory probe ran out of its " +
                                 std::to_string(timeout_seconds) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string log;
    try {
      log = base::read_file(log_path);
    } catch (const std::exception&) {
    }
    std::remove(log_path.c_str());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::remove(result_path.c_str());
      const std::string why = WIFSIGNALED(status)
                                  ? "killed by signal " + std::to_string(WTERMSIG(status))
                                  : last_line(log);
      throw std::runtime_error(probe.stage_path + ": the memory probe failed: " + why);
    }
    const nlohmann::ordered_json result = nlohmann::ordered_json::parse(base::read_file(result_path));
    std::remove(result_path.c_str());
    graph::StageMemory memory;
    memory.baseline_bytes = result.at("baseline_bytes").get<int64_t>();
    memory.peak_bytes = result.at("peak_bytes").get<int64_t>();
    memory.peak_phase = result.at("peak_phase").get<std::string>();
    for (const auto& [name, bytes] : result.at("phases").items()) {
      memory.phases.emplace_back(name, bytes.get<int64_t>());
    }
    if (result.contains("device_peak_bytes")) {
      memory.device_baseline_bytes = result.at("device_baseline_bytes").get<int64_t>();
      memory.device_peak_bytes = result.at("device_peak_bytes").get<int64_t>();
      for (const auto& [name, bytes] : result.at("device_phases").items()) {
        memory.device_phases.emplace_back(name, bytes.get<int64_t>());
      }
    }
    return memory;
  };
}

int run_probe_memory(const ProbeMemoryArgs& args) {
  try {
    // As the daemon runs: freed tensors go back to the kernel; one intra-op thread (per-thread
    // scratch is small beside a stage, and threads would only add noise to the figure).
    base::return_freed_memory_to_kernel();
    at::set_num_threads(1);
    training::MemoryProbeRequest request;
    request.stage_path = args.stage;
    request.micro_batches = graph::load_probe_inputs(args.inputs);
    request.root = args.root;
    request.leaf = args.leaf;
    request.ring = args.ring;
    request.in_flight = args.in_flight < 1 ? 1 : args.in_flight;
    request.stash_versions = args.stash_versions < 0 ? 0 : args.stash_versions;
    request.optimizer.name = config::OptimizerName::kAdam;  // two moments: the usual worst
    request.optimizer.lr = 1e-3;
    request.scratch_dir = args.scratch;
    request.device = training::compute_device(args.device);
    const auto result = training::probe_stage_memory(request);
    nlohmann::ordered_json out;
    out["baseline_bytes"] = result.baseline_bytes;
    out["inputs_bytes"] = result.inputs_bytes;
    out["peak_bytes"] = result.peak_bytes;
    std::string peak_phase;
    nlohmann::ordered_json phases = nlohmann::ordered_json::object();
    for (const auto& phase : result.phases) {
      phases[phase.name] = phase.peak_bytes;
      if (phase.peak_bytes == result.peak_bytes && peak_phase.empty()) peak_phase = phase.name;
    }
    out["peak_phase"] = peak_phase;
    out["phases"] = phases;
    if (training::device_memory_measurable(request.device)) {
      nlohmann::ordered_json device_phases = nlohmann::ordered_json::object();
      for (const auto& phase : result.phases) {
        device_phases[phase.name] = result.device_baseline_bytes + phase.device_peak_bytes;
      }
      out["device_baseline_bytes"] = result.device_baseline_bytes;
      out["device_peak_bytes"] = result.device_peak_bytes;
      out["device_phases"] = device_phases;
    }
    base::write_file_atomically(args.result, out.dump() + "\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace ravnest::cli
