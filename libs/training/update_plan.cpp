#include "libs/training/update_plan.h"

namespace ravnest::training {

namespace {

// The update up to the optimizer's step and what follows it at once: the servers' exchange, or
// the stage's own step with what prepares its gradients.
void add_step(const UpdateFacts& facts, std::vector<UpdateStep>& steps) {
  if (facts.parameter_servers) {
    steps.push_back({StepKind::kServerExchange});
    return;
  }
  if (facts.shared_tensors) steps.push_back({StepKind::kSumSharedGradients});
  if (facts.clusters > 1 && facts.reduce == config::ReduceMode::kGradients) {
    steps.push_back({StepKind::kReduceGradients});
  }
  if (facts.loss_scaler || facts.clip) steps.push_back({StepKind::kUnscaleAndClip});
  steps.push_back({StepKind::kOptimizerStep});
  if (facts.loss_scaler) steps.push_back({StepKind::kScalerUpdate});
  if (facts.embedding_rows) steps.push_back({StepKind::kPushRows});
}

}  // namespace

UpdatePlan make_update_plan(const UpdateFacts& facts) {
  UpdatePlan plan;
  add_step(facts, plan.update);
  plan.update.push_back({StepKind::kZeroGrad});
  plan.update.push_back({StepKind::kLrOnUpdate});
  plan.update.push_back({StepKind::kCountUpdate});
  // DiLoCo's outer step takes the place of parameter averaging; a [ps] worker's servers hold
  // the parameters, so it has no outer step of its own.
  if (facts.outer_every && !facts.parameter_servers) {
    plan.update.push_back({StepKind::kOuterStep, *facts.outer_every});
  } else if (facts.clusters > 1 && facts.reduce == config::ReduceMode::kParameters) {
    plan.update.push_back({StepKind::kAverageParameters, facts.reduce_factor});
  }
  if (facts.save_every > 0) plan.update.push_back({StepKind::kSaveStage, facts.save_every});

  plan.boundary.push_back({StepKind::kMarkBoundary});
  if (facts.save_every > 0) plan.boundary.push_back({StepKind::kWriteCheckpoint, facts.save_every});

  if (facts.clusters > 1 && !facts.parameter_servers) plan.end.push_back({StepKind::kAverageFinal});
  plan.end.push_back({StepKind::kSaveTrained});
  return plan;
}

std::string step_name(const UpdateStep& step) {
  const char* name = "";
  switch (step.kind) {
    case StepKind::kServerExchange: name = "server-exchange"; break;
    case StepKind::kSumSharedGradients: name = "sum-shared-gradients"; break;
    case StepKind::kReduceGradients: name = "reduce-gradients"; break;
    case StepKind::kUnscaleAndClip: name = "unscale-and-clip"; break;
    case StepKind::kOptimizerStep: name = "optimizer-step"; break;
    case StepKind::kScalerUpdate: name = "scaler-update"; break;
    case StepKind::kPushRows: name = "push-rows"; break;
    case StepKind::kZeroGrad: name = "zero-grad"; break;
    case StepKind::kLrOnUpdate: name = "lr-on-update"; break;
    case StepKind::kCountUpdate: name = "count-update"; break;
    case StepKind::kOuterStep: name = "outer-step"; break;
    case StepKind::kAverageParameters: name = "average-parameters"; break;
    case StepKind::kSaveStage: name = "save-stage"; break;
    case StepKind::kMarkBoundary: name = "mark-boundary"; break;
    case StepKind::kWriteCheckpoint: name = "write-checkpoint"; break;
    case StepKind::kAverageFinal: name = "average-final"; break;
    case StepKind::kSaveTrained: name = "save-trained"; break;
  }
  std::string out = name;
  if (step.every > 0) out += "/" + std::to_string(step.every);
  return out;
}

std::string describe(const UpdatePlan& plan) {
  std::string out;
  auto phase = [&](const char* title, const std::vector<UpdateStep>& steps) {
    if (!out.empty()) out += " | ";
    out += title;
    out += ":";
    for (size_t k = 0; k < steps.size(); ++k) out += (k ? ", " : " ") + step_name(steps[k]);
  };
  phase("update", plan.update);
  phase("boundary", plan.boundary);
  phase("end", plan.end);
  return out;
}

}  // namespace ravnest::training
