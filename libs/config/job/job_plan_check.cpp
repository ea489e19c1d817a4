#include "libs/config/job/job_plan_check.h"

#include "libs/base/config_error.h"
#include "libs/base/printable.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

namespace {

void check_parameter_server(const JobSpec& job, const std::vector<NodeMetadata>& nodes,
                            const std::string& origin) {
  const ParameterServerPlan* plan = nullptr;
  for (const auto& node : nodes) {
    if (!node.parameter_server.empty()) plan = &node.parameter_server;
  }
  if (!plan) {
    if (job.ps.present) {
      throw base::ConfigError(origin + ": ps: this plan has no parameter server (`ravnest clusterize "
                                 "--mode ps` makes one); remove [ps] to train the pipeline");
    }
    return;
  }
  // The servers step the shards: no worker holds the whole update to clip or to skip.
  if (job.train.grad_clip_norm || job.train.grad_clip_value) {
    throw base::ConfigError(origin + ": train.grad_clip_" +
                            (job.train.grad_clip_norm ? "norm" : "value") +
                            ": not with a parameter-server plan (its servers step the shards)");
  }
  if (job.train.autocast == Autocast::kFp16) {
    throw base::ConfigError(origin + ": train.autocast: \"fp16\" (its loss scaler) not with a "
                            "parameter-server plan; \"bf16\" needs none");
  }
  if (job.ps.mode == PsMode::kBackup &&
      static_cast<size_t>(job.ps.backup) > plan->workers.size()) {
    throw base::ConfigError(origin + ": ps.backup: " + std::to_string(job.ps.backup) +
                      " is more than the plan's " + std::to_string(plan->workers.size()) +
                      " workers");
  }
  if (!plan->hybrid() && job.sparse_optimizer) {
    throw base::ConfigError(origin + ": sparse_optimizer: this plan has no sparse tables (`ravnest "
                               "clusterize --mode hybrid --on-server NAME` makes one)");
  }
  if (plan->hybrid()) {
    if (!job.sparse_optimizer) {
      throw base::ConfigError(origin + ": sparse_optimizer: the plan's servers hold " +
                        base::printable(plan->sparse_tables.front().weight, 100) +
                        ": say how they optimize it ([sparse_optimizer] name = \"sgd\", "
                        "\"adagrad\" or \"sparse_adam\")");
    }
    if (job.ps.present && job.ps.mode != PsMode::kSync) {
      throw base::ConfigError(origin + ": ps.mode: a hybrid plan trains synchronously only");
    }
    if (job.train.schedule == PipelineSchedule::kAsync) {
      throw base::ConfigError(origin + ": train.schedule: a hybrid plan's trainers run \"gpipe\" or "
                                 "\"1f1b\", not \"async\"");
    }
  }
  if (plan->evaluator && job.data.validation.empty()) {
    throw base::ConfigError(origin + ": data.validation: the plan's evaluator (node_" +
                      std::to_string(plan->evaluator->node) +
                      ") scores the model on it: name the test data");
  }
}

}  // namespace

void check_job_for_plan(const JobSpec& job, const std::vector<NodeMetadata>& nodes,
                        const std::string& origin) {
  check_parameter_server(job, nodes, origin);
  if (job.train.schedule != PipelineSchedule::kAsync) return;
  for (const auto& node : nodes) {
    if (node.shared_parameters.empty()) continue;
    const auto& [name, holders] = *node.shared_parameters.begin();
    std::string held_by;
    for (size_t i = 0; i < holders.size(); ++i) {
      held_by += (i == 0 ? "" : i + 1 == holders.size() ? " and " : ", ") +
                 node_name(holders[i]);
    }
    throw base::ConfigError(origin + ": train.schedule: \"async\" cannot train " + base::printable(name, 100) +
                      ", which " + held_by +
                      " hold (tied or reused weights): use \"gpipe\" or \"1f1b\", or plan other "
                      "cuts");
  }
}

}  // namespace ravnest::config
