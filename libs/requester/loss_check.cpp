#include "libs/requester/loss_check.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include <ATen/core/grad_mode.h>

#include "libs/graph/stage_chain.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/loss.h"

namespace ravnest::requester {

void check_loss_on_first_sample(const Plan& plan, const config::JobSpec& job,
                                const data::Dataset& train, const std::string& job_path,
                                const std::function<void(const std::string&)>& log) {
  const auto ids = plan.cluster_ids();
  if (ids.empty() || train.size() == 0) return;
  const auto nodes = plan.cluster(ids.front());
  for (const auto& node : nodes) {
    if (node.parameter_server.hybrid()) return;  // tables on the servers: no whole model here
  }
  // The requester's machine need not hold the model (ravnest exists for models that fit no one
  // box): past a quarter of its memory, the check is left to the leaf's first batch.
  std::uintmax_t model_bytes = 0;
  for (const auto& node : nodes) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(std::filesystem::path(plan.dir) / node.stage_file, ec);
    if (!ec) model_bytes += size;
  }
  const double memory_bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                              static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory_bytes > 0 && static_cast<double>(model_bytes) > memory_bytes / 4) {
    if (log) {
      log("loss check skipped: cluster " + std::to_string(ids.front()) + "'s stages (" +
          std::to_string(model_bytes >> 20) + " MiB) are more than a quarter of this machine's "
          "memory; the leaf checks the loss at its first batch");
    }
    return;
  }
  c10::IValue output;
  data::Batch sample;
  try {
    at::NoGradGuard no_grad;
    auto chain = graph::StageChain::load(plan.dir, nodes);
    chain.train(false);
    sample = train.get_range(0, 1);
    output = chain.forward({sample.inputs.begin(), sample.inputs.end()}).output;
  } catch (const std::exception& e) {
    if (log) {
      log("loss check skipped: the model did not run here on the first sample (" +
          torch_support::torch_message(e) + ")");
    }
    return;
  }
  const training::Loss loss(job.loss);
  try {
    at::NoGradGuard no_grad;
    loss.check(output, sample.labels);
  } catch (const std::exception& e) {
    throw std::runtime_error(job_path + ": " + e.what());
  }
}

}  // namespace ravnest::requester
