// Fuzz target: job files (config::parse_job), as `ravnest train` reads them and as a daemon
// parses the text of loadJob. Errors: ConfigError, one line. An accepted job holds the
// documented bounds (docs/job-file.md) that the trainer relies on.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "libs/base/config_error.h"
#include "libs/config/job/job_spec.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::config;
using namespace ravnest::base;

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "accepted job breaks: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  JobSpec job;
  try {
    job = parse_job(ravnest::fuzz::text_of(data, size), "job.toml");
  } catch (const ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
    return 0;
  }
  const TrainSpec& t = job.train;
  require(t.epochs >= 1 && t.batch_size >= 1, "epochs and batch_size >= 1");
  require(t.micro_batches >= 1 && t.micro_batches <= t.batch_size, "1 <= micro_batches <= batch_size");
  require(t.update_frequency >= 1 && t.reduce_factor >= 1, "update_frequency, reduce_factor >= 1");
  require(!job.data.train.empty(), "data.train set");
  for (int64_t d : job.data.input_shape) require(d >= 1, "input_shape positive");
  require(job.loss.name != LossName::kScript || !job.loss.path.empty(), "a script loss has a path");
  if (job.scheduler) {
    const auto& milestones = job.scheduler->milestones;
    for (size_t i = 1; i < milestones.size(); ++i) require(milestones[i - 1] < milestones[i], "milestones increase");
  }
  return 0;
}
