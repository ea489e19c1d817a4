// Samples/s of one model trained by a pipeline of local daemons (cut evenly), next to
// single-process training of the same model and job measured in the same run, with each stage's
// busy fraction (the seconds it computed: forwards, backwards, handing what they send on,
// updates; over the seconds it ran) and the stage bound it implies: the samples/s the pipeline
// would reach if its busiest stage never waited (measured samples/s over the busiest stage's
// fraction). What the pipeline loses besides its slowest stage's work is the idle time per
// micro-batch of that stage, printed too.
//   bench_pipeline_throughput [--plain] [--device DEV] [--pytorch PYTHON [--script PATH]]
//                             MODEL.pt JOB.toml STAGES...
// --plain: each pipeline over TLS (as always) and again over plain TCP (--insecure), to show
// what TLS costs. --device: the daemons compute there (ravnestd --device: cpu, cuda, cuda:N).
// --pytorch: one PyTorch process trains the same job on the same device as the baseline
// (PYTHON runs tests/python/reference_train.py --timing, or --script's path: the same batches,
// micro-batches and optimizer, the device synchronized at both ends of the timing); each
// pipeline prints `ours/pytorch = X.XXx`. Without it, or besides it on the CPU, the baseline is
// single-process LibTorch in this process (CPU only: skipped for another device).
// Prints figures; asserts nothing (bench/pipeline.sh and bench/gpu_pipeline.sh make the inputs).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include "bench/even_pipeline.h"
#include "libs/base/atomic_file.h"
#include "libs/config/job/job_spec.h"
#include "libs/training/reference_trainer.h"

namespace fs = std::filesystem;
using namespace ravnest;

namespace {

struct PipelineRun {
  double samples_per_second = 0;
  std::vector<wire::NodeStatusData> stages;
};

PipelineRun train_on_daemons(const fs::path& work, const std::string& model_path,
                             const std::string& job_path, int stages, bool insecure,
                             const std::string& device) {
  PipelineRun run;
  std::vector<std::string> flags;
  if (device != "cpu") flags = {"--device", device};
  const auto result = bench::train_even_pipeline(
      work / ("bench_" + std::to_string(stages) + (insecure ? "_plain" : "")), model_path, stages,
      job_path, insecure, {}, nullptr, &run.stages, flags);
  run.samples_per_second = result.clusters.at(0).samples_per_second;
  return run;
}

void print_run(const char* label, const PipelineRun& run, double single, double pytorch,
               int micro_batches) {
  if (single > 0) {
    std::printf("%-28s %9.1f samples/s  (%.2fx single-process LibTorch)\n", label,
                run.samples_per_second, run.samples_per_second / single);
  } else {
    std::printf("%-28s %9.1f samples/s\n", label, run.samples_per_second);
  }
  if (pytorch > 0) {
    std::printf("    ours/pytorch = %.2fx\n", run.samples_per_second / pytorch);
  }
  double busiest = 0;
  size_t at = 0;
  for (size_t i = 0; i < run.stages.size(); ++i) {
    const auto& s = run.stages[i];
    const double fraction = s.running_seconds > 0 ? s.busy_seconds / s.running_seconds : 0;
    const double micro = static_cast<double>(s.batches) * micro_batches;
    std::printf("    stage %zu (%s, %-4s) busy %5.1f%%  %7.3f ms computing per micro-batch\n", i,
                s.node.c_str(), s.role.c_str(), 100 * fraction,
                micro > 0 ? 1e3 * s.busy_seconds / micro : 0.0);
    if (fraction > busiest) {
      busiest = fraction;
      at = i;
    }
  }
  if (busiest <= 0) return;
  const auto& slow = run.stages[at];
  const double micro = static_cast<double>(slow.batches) * micro_batches;
  std::printf("    stage bound %9.0f samples/s: reached %.0f%%; stage %zu idles %.3f ms per "
              "micro-batch\n",
              run.samples_per_second / busiest, 100 * busiest, at,
              micro > 0 ? 1e3 * (slow.running_seconds - slow.busy_seconds) / micro : 0.0);
}

// One PyTorch process training the job (tests/python/reference_train.py --timing): samples/s.
double pytorch_samples_per_second(const std::string& python, const std::string& script,
                                  const std::string& model_path, const std::string& job_path,
                                  const std::string& device, const fs::path& work) {
  const fs::path state = work / "pytorch_state.pt";
  const fs::path timing = work / "pytorch_timing.json";
  fs::remove(timing);
  const std::string command = "'" + python + "' '" + script + "' '" + job_path + "' '" +
                              model_path + "' '" + state.string() + "' --device '" + device +
                              "' --timing '" + timing.string() + "'";
  std::fflush(stdout);
  const int rc = std::system(command.c_str());
  if (rc != 0 || !fs::exists(timing)) {
    throw std::runtime_error("the PyTorch baseline failed (exit " + std::to_string(rc) +
                             "): " + command);
  }
  fs::remove(state);
  const auto report = nlohmann::json::parse(base::read_file(timing.string()));
  std::printf("%-28s %9.1f samples/s (torch %s on %s, %lld samples in %.2f s: the ratios' "
              "baseline)\n",
              "single-process PyTorch", report.at("samples_per_second").get<double>(),
              report.at("torch").get<std::string>().c_str(),
              report.at("device").get<std::string>().c_str(),
              static_cast<long long>(report.at("samples").get<int64_t>()),
              report.at("seconds").get<double>());
  if (report.contains("after_first_batch_samples_per_second")) {
    // The first batch pays for first uses (kernels, cuDNN's and cuBLAS's set-up); the daemons'
    // figure includes theirs as well, so the ratio is against the whole run.
    std::printf("%-28s %9.1f samples/s after its first batch (not the baseline)\n", "",
                report.at("after_first_batch_samples_per_second").get<double>());
  }
  return report.at("samples_per_second").get<double>();
}

}  // namespace

int main(int argc, char** argv) {
  bool compare_plain = false;
  std::string device = "cpu";
  std::string python;
  std::string script = "tests/python/reference_train.py";
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--plain") {
        compare_plain = true;
      } else if (a == "--device") {
        device = value();
      } else if (a == "--pytorch") {
        python = value();
      } else if (a == "--script") {
        script = value();
      } else {
        positional.push_back(a);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench: %s\n", e.what());
      return 2;
    }
  }
  if (positional.size() < 3) {
    std::fprintf(stderr,
                 "usage: %s [--plain] [--device DEV] [--pytorch PYTHON [--script PATH]] MODEL.pt "
                 "JOB.toml STAGES...\n",
                 argv[0]);
    return 2;
  }
  const std::string model_path = fs::absolute(positional[0]).string();
  const std::string job_path = fs::absolute(positional[1]).string();
  std::vector<int> stages;
  for (size_t i = 2; i < positional.size(); ++i) stages.push_back(std::stoi(positional[i]));
  const fs::path work = fs::path(job_path).parent_path();
  try {
    const auto job = config::load_job(job_path);
    std::printf("%s: batch %lld in %d micro-batches, %lld epoch(s), %s, on %s\n",
                fs::path(model_path).filename().c_str(),
                static_cast<long long>(job.train.batch_size), job.train.micro_batches,
                static_cast<long long>(job.train.epochs), config::to_string(job.train.schedule),
                device.c_str());
    double single = 0;
    if (device == "cpu") {
      const auto reference = training::train_reference(model_path, job);
      single = reference.samples_per_second;
      std::printf("%-28s %9.1f samples/s (%d intra-op threads%s)\n", "single-process LibTorch",
                  reference.samples_per_second, at::get_num_threads(),
                  python.empty() ? ": the ratios' baseline" : "");
      // The daemons share the cores (each gets cores / daemons threads): what one thread does.
      const int threads = at::get_num_threads();
      at::set_num_threads(1);
      const auto one = training::train_reference(model_path, job);
      at::set_num_threads(threads);
      std::printf("%-28s %9.1f samples/s\n", "  the same on 1 thread", one.samples_per_second);
    }
    double pytorch = 0;
    if (!python.empty()) {
      pytorch = pytorch_samples_per_second(python, fs::absolute(script).string(), model_path,
                                           job_path, device, work);
    }
    if (single <= 0 && pytorch <= 0) {
      throw std::runtime_error("no baseline: on " + device + ", give --pytorch PYTHON");
    }
    std::fflush(stdout);
    for (int k : stages) {
      const std::string label = std::to_string(k) + " stage(s), local daemons";
      const auto run = train_on_daemons(work, model_path, job_path, k, false, device);
      print_run(label.c_str(), run, single, pytorch, job.train.micro_batches);
      std::fflush(stdout);
      if (!compare_plain) continue;
      const auto plain = train_on_daemons(work, model_path, job_path, k, true, device);
      print_run("  the same over plain TCP", plain, single, pytorch, job.train.micro_batches);
      std::printf("    TLS/plain %.2fx\n", run.samples_per_second / plain.samples_per_second);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
