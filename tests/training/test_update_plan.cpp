// The update plan (libs/training/update_plan.h): each training mode's steps, in their order, on
// plain facts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "libs/training/update_plan.h"

using namespace ravnest;
using training::StepKind;
using training::UpdateFacts;
using training::UpdateStep;

namespace {

std::vector<std::string> names(const std::vector<UpdateStep>& steps) {
  std::vector<std::string> out;
  for (const auto& s : steps) out.push_back(training::step_name(s));
  return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("update plan: a pipeline of one cluster steps, counts, and saves at the end",
          "[update_plan]") {
  const auto plan = training::make_update_plan(UpdateFacts{});
  CHECK(names(plan.update) == Names{"optimizer-step", "zero-grad", "lr-on-update", "count-update"});
  CHECK(names(plan.boundary) == Names{"mark-boundary"});
  CHECK(names(plan.end) == Names{"save-trained"});
  CHECK(training::describe(plan) ==
        "update: optimizer-step, zero-grad, lr-on-update, count-update | boundary: mark-boundary"
        " | end: save-trained");
}

TEST_CASE("update plan: a parameter-server worker exchanges with the servers instead of stepping",
          "[update_plan]") {
  UpdateFacts facts;
  facts.parameter_servers = true;
  facts.clusters = 3;
  facts.reduce = config::ReduceMode::kGradients;
  facts.shared_tensors = true;  // the servers hold the tensors: nothing to sum on the stage
  facts.clip = true;
  facts.outer_every = 5;        // the servers' parameters: no outer step on a worker
  const auto plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"server-exchange", "zero-grad", "lr-on-update", "count-update"});
  CHECK(names(plan.end) == Names{"save-trained"});  // no final average: the servers hold them
}

TEST_CASE("update plan: a hybrid trainer steps its dense part and pushes its rows",
          "[update_plan]") {
  UpdateFacts facts;
  facts.embedding_rows = true;
  facts.clusters = 2;
  facts.reduce = config::ReduceMode::kGradients;
  const auto plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"reduce-gradients", "optimizer-step", "push-rows", "zero-grad",
                                    "lr-on-update", "count-update"});
  CHECK(names(plan.end) == Names{"average-final", "save-trained"});
}

TEST_CASE("update plan: rings reduce gradients before the step, or average parameters every k",
          "[update_plan]") {
  UpdateFacts facts;
  facts.clusters = 2;
  facts.shared_tensors = true;
  facts.reduce = config::ReduceMode::kGradients;
  auto plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"sum-shared-gradients", "reduce-gradients", "optimizer-step",
                                    "zero-grad", "lr-on-update", "count-update"});
  CHECK(names(plan.end) == Names{"average-final", "save-trained"});

  facts.reduce = config::ReduceMode::kParameters;
  facts.reduce_factor = 4;
  plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"sum-shared-gradients", "optimizer-step", "zero-grad",
                                    "lr-on-update", "count-update", "average-parameters/4"});
  CHECK(plan.update.back() == UpdateStep{StepKind::kAverageParameters, 4});

  facts.clusters = 1;  // one cluster: nothing to average across
  plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"sum-shared-gradients", "optimizer-step", "zero-grad",
                                    "lr-on-update", "count-update"});
  CHECK(names(plan.end) == Names{"save-trained"});
}

TEST_CASE("update plan: DiLoCo's outer step replaces parameter averaging", "[update_plan]") {
  UpdateFacts facts;
  facts.clusters = 3;
  facts.reduce_factor = 2;
  facts.outer_every = 10;
  auto plan = training::make_update_plan(facts);
  CHECK(names(plan.update) ==
        Names{"optimizer-step", "zero-grad", "lr-on-update", "count-update", "outer-step/10"});
  CHECK(names(plan.end) == Names{"average-final", "save-trained"});
  facts.clusters = 1;  // one cluster still steps with its own delta
  plan = training::make_update_plan(facts);
  CHECK(plan.update.back() == UpdateStep{StepKind::kOuterStep, 10});
}

TEST_CASE("update plan: fp16's scaler and clipping wrap the step", "[update_plan]") {
  UpdateFacts facts;
  facts.loss_scaler = true;
  facts.clip = true;
  auto plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"unscale-and-clip", "optimizer-step", "scaler-update",
                                    "zero-grad", "lr-on-update", "count-update"});
  facts.loss_scaler = false;  // clipping alone: nothing to update after the step
  plan = training::make_update_plan(facts);
  CHECK(names(plan.update) ==
        Names{"unscale-and-clip", "optimizer-step", "zero-grad", "lr-on-update", "count-update"});
  facts.clip = false;
  facts.loss_scaler = true;
  plan = training::make_update_plan(facts);
  CHECK(names(plan.update) == Names{"unscale-and-clip", "optimizer-step", "scaler-update",
                                    "zero-grad", "lr-on-update", "count-update"});
}

TEST_CASE("update plan: save_every saves the stage and writes the checkpoint every n updates",
          "[update_plan]") {
  UpdateFacts facts;
  facts.save_every = 3;
  const auto plan = training::make_update_plan(facts);
  CHECK(plan.update.back() == UpdateStep{StepKind::kSaveStage, 3});
  CHECK(names(plan.boundary) == Names{"mark-boundary", "write-checkpoint/3"});
  CHECK_FALSE(training::due_every(3, 2));
  CHECK(training::due_every(3, 6));
  CHECK_FALSE(training::due_every(0, 6));
}
