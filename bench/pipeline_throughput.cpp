// Samples/s of the digits demo trained by 1, 2 and 3 local daemons (one pipeline), next to
// single-process LibTorch training of the same model and job measured in the same run; each
// pipeline over TLS (as always) and over plain TCP (--insecure), to show what TLS costs.
//   bench_pipeline_throughput WORK_DIR [STAGES...]
// WORK_DIR holds small_cnn.pt, the digits CSVs and job.toml (bench/pipeline_throughput.sh
// makes them). Prints figures; asserts nothing.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/even_pipeline.h"
#include "libs/config/job_spec.h"
#include "libs/training/reference_trainer.h"

namespace fs = std::filesystem;
using namespace ravnest;

static double train_on_daemons(const fs::path& work, const std::string& model_path, int stages,
                               bool insecure) {
  const auto result = bench::train_even_pipeline(work / ("bench_" + std::to_string(stages)),
                                                 model_path, stages, (work / "job.toml").string(),
                                                 insecure);
  return result.clusters.at(0).samples_per_second;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s WORK_DIR [STAGES...]\n", argv[0]);
    return 2;
  }
  const fs::path work = argv[1];
  std::vector<int> stages;
  for (int i = 2; i < argc; ++i) stages.push_back(std::stoi(argv[i]));
  if (stages.empty()) stages = {1, 2, 3};
  const std::string model_path = (work / "small_cnn.pt").string();
  try {
    const auto job = config::load_job((work / "job.toml").string());
    const auto reference = runtime::train_reference(model_path, job);
    std::printf("single-process LibTorch     %9.0f samples/s\n", reference.samples_per_second);
    for (int k : stages) {
      const double rate = train_on_daemons(work, model_path, k, false);
      std::printf("%d stage(s) on local daemons %9.0f samples/s  (%.2fx single-process)\n", k,
                  rate, rate / reference.samples_per_second);
      const double plain = train_on_daemons(work, model_path, k, true);
      std::printf("  the same over plain TCP   %9.0f samples/s  (TLS/plain %.2fx)\n", plain,
                  rate / plain);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
