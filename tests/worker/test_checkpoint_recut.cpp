// training::recut_checkpoints in one process (LocalPort): a cluster cut one way trains and
// checkpoints; its checkpoints of update 3, re-cut to the stages of another cut, resume there and
// train to the end; the result is the uninterrupted run's (a pipeline's arithmetic does not depend
// on its cut). What it must carry shows: Adam's moments and step, the random stream dropout draws
// from (dropout_twice: a chain of random stages), BatchNorm's buffers (small_cnn). The same
// resume without the optimizer's state is far from it, so the comparison can fail. On LibTorch
// 2.x also the .pt2 of the model, torch.export's stages.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/stage/stage_file.h"
#include "libs/store/checkpoint_store.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/training/checkpoint_recut.h"
#include "libs/worker/job_setup.h"
#include "tests/support/digits.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/local_cluster.h"
#include "tests/support/test_env.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

constexpr const char* kIdentity = "0123456789abcdef";

// 16 samples (tests/models/export_models.py), batches of 8 in two micro-batches, 3 epochs: six
// updates, a checkpoint after the third.
std::string job_text(const test::ModelFiles& files) {
  return "[train]\nepochs = 3\nbatch_size = 8\nmicro_batches = 2\nschedule = \"1f1b\"\nseed = 11\n"
         "save_every = 3\n\n[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file +
         "\"\n\n[loss]\nname = \"" + files.loss +
         "\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n";
}

// A tamper that makes each node write its checkpoints under `dir`/<node name> as job kIdentity.
std::function<void(worker::JobSetup&)> checkpoints_under(const test::TempDir& dir) {
  return [&dir](worker::JobSetup& made) {
    auto& setup = made.common;
    setup.checkpoints = std::make_shared<store::CheckpointStore>(dir / setup.node.name);
    setup.identity = kIdentity;
  };
}

// Each node's checkpoint after update 3 of job kIdentity, written under `dir` by
// checkpoints_under, in the cluster's order; each node must hold exactly one.
std::vector<std::string> checkpoints_after_3(const test::InProcessCluster& cluster,
                                             const test::TempDir& dir) {
  std::vector<std::string> paths;
  for (const auto& m : cluster.metadata()) {
    store::CheckpointStore store(dir / m.name);
    const auto kept = store.updates(kIdentity);
    REQUIRE(std::count(kept.begin(), kept.end(), uint64_t{3}) == 1);
    paths.push_back(store.file(kIdentity, 3).string());
  }
  return paths;
}

std::vector<training::CutStage> stages_of(const test::InProcessCluster& cluster) {
  std::vector<training::CutStage> stages;
  for (const auto& m : cluster.metadata()) {
    stages.push_back({m, (fs::path(cluster.plan_dir()) / m.stage_file).string()});
  }
  return stages;
}

// Trained tensors by name, one for a name several stages hold (the same after every update).
std::map<std::string, at::Tensor> by_name(const std::multimap<std::string, at::Tensor>& state) {
  return {state.begin(), state.end()};
}

// `pt2`: the zoo's torch.export archive of the model (NAME.pt2 beside NAME.pt) instead.
void check_recut(const std::string& model, int from_stages, int to_stages, bool pt2 = false) {
  test::ModelFiles files = test::model_files(model);
  if (pt2) files.model = fs::path(files.model).replace_extension(".pt2").string();
  const config::JobSpec job = config::parse_job(job_text(files), "test job");
  test::TempDir dir;
  test::InProcessCluster from(files, test::LocalCluster::even_cuts(files.model, from_stages));
  test::InProcessCluster to(files, test::LocalCluster::even_cuts(files.model, to_stages));
  REQUIRE(from.metadata().size() == static_cast<size_t>(from_stages));
  REQUIRE(to.metadata().size() == static_cast<size_t>(to_stages));
  // The stages are of the model's format: torch.export archives from a .pt2.
  for (const auto& stage : stages_of(to)) {
    CHECK(stage::stage_format_of(stage.stage_path) ==
          (pt2 ? stage::StageFormat::kExported : stage::StageFormat::kTorchScript));
  }

  // The uninterrupted run, checkpointing after update 3.
  const auto whole = from.train(job, checkpoints_under(dir));
  const std::vector<std::string> paths = checkpoints_after_3(from, dir);
  std::map<int, training::StageCheckpoint> recut;  // by position
  training::recut_checkpoints(stages_of(from), paths, stages_of(to), job.optimizer,
                              [&](size_t k, const training::StageCheckpoint& c) {
                                CHECK(c.position == static_cast<int>(k));
                                CHECK(c.updates == 3);
                                CHECK(c.losses.empty());
                                recut.emplace(c.position, c);
                              });
  REQUIRE(recut.size() == static_cast<size_t>(to_stages));

  auto resumed = [&](bool with_optimizer) {
    return to.train(job, [&](worker::JobSetup& made) {
      auto& setup = made.common;
      setup.resume = recut.at(setup.node.position);
      if (!with_optimizer) setup.resume->optimizer.clear();
    });
  };
  std::string where;
  const auto uninterrupted = by_name(whole.state);
  const double apart =
      test::largest_difference(uninterrupted, by_name(resumed(true).state), &where);
  INFO(model << ": " << from_stages << " stages re-cut to " << to_stages << " after update 3: "
             << apart << " from the uninterrupted run in " << where);
  CHECK(apart <= 1e-6);
  WARN(model << ": " << apart << " from the uninterrupted run after the re-cut");
  const double without =
      test::largest_difference(uninterrupted, by_name(resumed(false).state), &where);
  INFO("without the optimizer's state: " << without << " in " << where);
  CHECK(without > 1e-4);
  WARN(model << ": " << without << " without the optimizer's state");
}

}  // namespace

TEST_CASE("checkpoint re-cut: dropout_twice, three stages to two (Adam, the random chain)",
          "[recut]") {
  check_recut("dropout_twice", 3, 2);
}

TEST_CASE("checkpoint re-cut: small_cnn, two stages to three (BatchNorm's buffers)", "[recut]") {
  check_recut("small_cnn", 2, 3);
}

TEST_CASE("checkpoint re-cut: dropout_twice's .pt2, three stages to two (torch.export's stages)",
          "[recut]") {
  if (torch_support::kTorchMajor < 2) {
    WARN("the .pt2 runtime is LibTorch 2.x's: the 2.x build runs this case");
    return;
  }
  check_recut("dropout_twice", 3, 2, /*pt2=*/true);
}

// What cannot be re-cut is refused in one line naming it, before anything is written: a source
// checkpoint of another update, and a target cut from another model.
TEST_CASE("checkpoint re-cut: checkpoints of two updates, or another model's stages: one line",
          "[recut]") {
  const test::ModelFiles files = test::model_files("small_cnn");
  const config::JobSpec job = config::parse_job(job_text(files), "test job");
  test::TempDir dir;
  test::InProcessCluster from(files, test::LocalCluster::even_cuts(files.model, 2));
  from.train(job, checkpoints_under(dir));
  const std::vector<std::string> paths = checkpoints_after_3(from, dir);
  size_t written = 0;
  auto count = [&written](size_t, const training::StageCheckpoint&) { ++written; };

  training::StageCheckpoint later = training::load_checkpoint(paths[1]);
  later.updates = 4;
  const std::string other_update = (dir / "later.pt").string();
  training::save_checkpoint(later, other_update);
  CHECK_THROWS_WITH(training::recut_checkpoints(stages_of(from), {paths[0], other_update},
                                                stages_of(from), job.optimizer, count),
                    Catch::Contains("re-cut: node_1's checkpoint is of update 4, node_0's of 3"));

  const test::ModelFiles others = test::model_files("dropout_twice");
  test::InProcessCluster unlike(others, test::LocalCluster::even_cuts(others.model, 2));
  CHECK_THROWS_WITH(training::recut_checkpoints(stages_of(from), paths, stages_of(unlike),
                                                job.optimizer, count),
                    Catch::Contains("re-cut: ") && Catch::Contains("node_0's stage"));
  CHECK(written == 0);
}
