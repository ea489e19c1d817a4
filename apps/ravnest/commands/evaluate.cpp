// ravnest evaluate MODEL JOB: loss and accuracy of a model (TorchScript, or a torch.export .pt2 on
// the LibTorch 2.x build) on a job's data, here.
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include <torch/csrc/jit/api/module.h>

#include "apps/ravnest/commands/commands.h"
#include "libs/stage/stage_file.h"
#include "libs/config/job/job_spec.h"
#include "libs/data/dataset.h"
#include "libs/torch_support/module_file.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/evaluate.h"
#include "libs/training/loss.h"

namespace ravnest::cli {
namespace {

int run_evaluate(const std::string& model_path, const std::string& job_path, bool on_train) {
  auto job = config::load_job(job_path);
  auto dataset = data::load_dataset(
      job.data, on_train || job.data.validation.empty() ? data::Split::kTrain
                                                        : data::Split::kValidation);
  auto model = stage::load_stage(model_path);
  training::Loss loss(job.loss);
  training::Evaluation evaluation;
  try {
    evaluation = training::evaluate(*model, dataset, loss, job.train.batch_size);
  } catch (const std::exception& e) {
    throw std::runtime_error(model_path + " on " + dataset.origin() + ": " +
                             torch_support::torch_message(e));
  }
  std::printf("%s on %s: loss %.6f", model_path.c_str(), dataset.origin().c_str(),
              evaluation.loss);
  if (std::isfinite(evaluation.accuracy)) std::printf(", accuracy %.4f", evaluation.accuracy);
  std::printf(" (%lld samples)\n", static_cast<long long>(evaluation.samples));
  return 0;
}

struct EvaluateCommand {
  std::string model, job;
  bool on_train = false;
};

}  // namespace

Command add_evaluate(CLI::App& app) {
  auto c = std::make_shared<EvaluateCommand>();
  auto* cmd = app.add_subcommand("evaluate", "Loss and accuracy of a model on a job's data");
  cmd->add_option("model", c->model,
                  "TorchScript model (e.g. trained/model.pt) or torch.export archive (.pt2)")
      ->required();
  cmd->add_option("job", c->job, "job file naming the data and the loss")->required();
  cmd->add_flag("--train-data", c->on_train, "use the training data, not validation");
  return {cmd, [c] { return run_evaluate(c->model, c->job, c->on_train); }};
}

}  // namespace ravnest::cli
