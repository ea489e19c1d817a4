// Samples/s of one model trained by a pipeline of local daemons (cut evenly), next to
// single-process LibTorch training of the same model and job measured in the same run, with
// each stage's busy fraction (the seconds it computed: forwards, backwards, handing what they
// send on, updates; over the seconds it ran) and the stage bound it implies: the samples/s
// the pipeline would reach if its busiest stage never waited (measured samples/s over the
// busiest stage's fraction). What the pipeline loses besides its slowest stage's work is the
// idle time per micro-batch of that stage, printed too.
//   bench_pipeline_throughput [--plain] MODEL.pt JOB.toml STAGES...
// --plain: each pipeline over TLS (as always) and again over plain TCP (--insecure), to show
// what TLS costs. Prints figures; asserts nothing (bench/pipeline.sh makes the inputs).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "bench/even_pipeline.h"
#include "libs/config/job_spec.h"
#include "libs/training/reference_trainer.h"

namespace fs = std::filesystem;
using namespace ravnest;

namespace {

struct PipelineRun {
  double samples_per_second = 0;
  std::vector<wire::NodeStatusData> stages;
};

PipelineRun train_on_daemons(const fs::path& work, const std::string& model_path,
                             const std::string& job_path, int stages, bool insecure) {
  PipelineRun run;
  const auto result = bench::train_even_pipeline(
      work / ("bench_" + std::to_string(stages) + (insecure ? "_plain" : "")), model_path, stages,
      job_path, insecure, {}, nullptr, &run.stages);
  run.samples_per_second = result.clusters.at(0).samples_per_second;
  return run;
}

void print_run(const char* label, const PipelineRun& run, double single, int micro_batches) {
  std::printf("%-28s %9.0f samples/s  (%.2fx single-process)\n", label, run.samples_per_second,
              run.samples_per_second / single);
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

}  // namespace

int main(int argc, char** argv) {
  int arg = 1;
  bool compare_plain = false;
  if (arg < argc && std::strcmp(argv[arg], "--plain") == 0) {
    compare_plain = true;
    ++arg;
  }
  if (argc - arg < 3) {
    std::fprintf(stderr, "usage: %s [--plain] MODEL.pt JOB.toml STAGES...\n", argv[0]);
    return 2;
  }
  const std::string model_path = fs::absolute(argv[arg]).string();
  const std::string job_path = fs::absolute(argv[arg + 1]).string();
  std::vector<int> stages;
  for (int i = arg + 2; i < argc; ++i) stages.push_back(std::stoi(argv[i]));
  const fs::path work = fs::path(job_path).parent_path();
  try {
    const auto job = config::load_job(job_path);
    const auto reference = runtime::train_reference(model_path, job);
    std::printf("%s: batch %lld in %d micro-batches, %lld epoch(s), %s\n",
                fs::path(model_path).filename().c_str(),
                static_cast<long long>(job.train.batch_size), job.train.micro_batches,
                static_cast<long long>(job.train.epochs), config::to_string(job.train.schedule));
    std::printf("%-28s %9.0f samples/s (%d intra-op threads: the ratios' baseline)\n",
                "single-process LibTorch", reference.samples_per_second, at::get_num_threads());
    {
      // The daemons share the cores (each gets cores / daemons threads): what one thread does.
      const int threads = at::get_num_threads();
      at::set_num_threads(1);
      const auto one = runtime::train_reference(model_path, job);
      at::set_num_threads(threads);
      std::printf("%-28s %9.0f samples/s\n", "  the same on 1 thread", one.samples_per_second);
    }
    for (int k : stages) {
      const std::string label = std::to_string(k) + " stage(s), local daemons";
      const auto run = train_on_daemons(work, model_path, job_path, k, false);
      print_run(label.c_str(), run, reference.samples_per_second, job.train.micro_batches);
      if (!compare_plain) continue;
      const auto plain = train_on_daemons(work, model_path, job_path, k, true);
      print_run("  the same over plain TCP", plain, reference.samples_per_second,
                job.train.micro_batches);
      std::printf("    TLS/plain %.2fx\n", run.samples_per_second / plain.samples_per_second);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
