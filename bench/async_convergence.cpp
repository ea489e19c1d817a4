// The digits demo's job trained by a 3-stage pipeline of local daemons, synchronously (the job's
// own schedule) and asynchronously (schedule = "async"), in the same run: the training loss per
// epoch side by side, then validation, samples/s and their ratio.
//   bench_async_convergence WORK_DIR [STAGES] [MAX_IN_FLIGHT]
// WORK_DIR holds small_cnn.pt, the digits CSVs and job.toml (bench/async_convergence.sh makes
// them). Prints figures; asserts nothing.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/even_pipeline.h"
#include "libs/config/job/job_spec.h"

namespace fs = std::filesystem;
using namespace ravnest;

namespace {

struct Run {
  requester::TrainResult result;
  std::vector<double> epoch_loss;  // mean batch loss per epoch
};

Run train(const fs::path& work, int stages, const std::string& job_text, const std::string& name,
          int64_t batches_per_epoch) {
  const fs::path job = work / ("job_" + name + ".toml");
  std::ofstream(job) << job_text;
  Run run;
  std::string losses;
  run.result = bench::train_even_pipeline(work / ("run_" + name), (work / "small_cnn.pt").string(),
                                          stages, job.string(), false, {}, &losses);
  std::istringstream lines(losses);
  std::string line;
  double sum = 0;
  int64_t n = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    sum += std::stod(line.substr(line.find_last_of(" \t,") == std::string::npos
                                     ? 0
                                     : line.find_last_of(" \t,") + 1));
    if (++n == batches_per_epoch) {
      run.epoch_loss.push_back(sum / n);
      sum = 0;
      n = 0;
    }
  }
  if (n > 0) run.epoch_loss.push_back(sum / n);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s WORK_DIR [STAGES] [MAX_IN_FLIGHT]\n", argv[0]);
    return 2;
  }
  const fs::path work = argv[1];
  const int stages = argc > 2 ? std::stoi(argv[2]) : 3;
  const int max_in_flight = argc > 3 ? std::stoi(argv[3]) : 0;
  try {
    std::ifstream in(work / "job.toml");
    std::stringstream text;
    text << in.rdbuf();
    const std::string sync_text = text.str();
    const auto job = config::parse_job(sync_text, (work / "job.toml").string());
    std::string async_text = std::regex_replace(sync_text, std::regex("schedule = \"[a-z0-9]+\""),
                                                "schedule = \"async\"");
    if (max_in_flight > 0) {
      async_text = std::regex_replace(async_text, std::regex("\\[train\\]\n"),
                                      "[train]\nmax_in_flight = " + std::to_string(max_in_flight) +
                                          "\n");
    }
    // Batches an epoch: the training CSV's rows (less its header) over the batch size.
    std::ifstream csv(job.data.train.resolved);
    int64_t rows = -1;
    for (std::string line; std::getline(csv, line);) ++rows;
    const int64_t per_epoch = (rows + job.train.batch_size - 1) / job.train.batch_size;

    const Run sync = train(work, stages, sync_text, "sync", per_epoch);
    const Run async = train(work, stages, async_text, "async", per_epoch);
    std::printf("digits CNN, %d stages, %lld epochs, batches of %lld in %d micro-batches; "
                "sync = %s, async max_in_flight = %s\n",
                stages, static_cast<long long>(job.train.epochs),
                static_cast<long long>(job.train.batch_size), job.train.micro_batches,
                config::to_string(job.train.schedule),
                max_in_flight > 0 ? std::to_string(max_in_flight).c_str() : "stages");
    std::printf("%-6s %12s %12s\n", "epoch", "sync loss", "async loss");
    for (size_t e = 0; e < std::max(sync.epoch_loss.size(), async.epoch_loss.size()); ++e) {
      std::printf("%-6zu %12.4f %12.4f\n", e + 1,
                  e < sync.epoch_loss.size() ? sync.epoch_loss[e] : NAN,
                  e < async.epoch_loss.size() ? async.epoch_loss[e] : NAN);
    }
    const auto& s = sync.result.clusters.at(0);
    const auto& a = async.result.clusters.at(0);
    if (s.has_validation && a.has_validation) {
      std::printf("validation accuracy  sync %.4f  async %.4f\n", s.validation_accuracy,
                  a.validation_accuracy);
      std::printf("validation loss      sync %.4f  async %.4f\n", s.validation_loss,
                  a.validation_loss);
    }
    std::printf("samples/s            sync %.0f  async %.0f  (async/sync %.2fx)\n",
                s.samples_per_second, a.samples_per_second,
                a.samples_per_second / s.samples_per_second);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
