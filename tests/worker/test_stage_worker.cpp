// StageWorkers trained in one process (LocalPort, tests/support/local_port.h) against the
// single-process reference trainer: the fast, process-free counterpart of the fidelity matrix
// (tests/integration/test_training_fidelity.cpp). The plan is the project's own (write_plan with
// chosen cuts), each node's stage goes through a NodeStore and make_worker_setup as in a daemon;
// only the sockets are missing. Each model is one test case (one ctest entry).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libs/stage/torchscript_stage.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/base/sha256.h"
#include "libs/worker/job_setup.h"
#include "libs/store/node_store.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_builder.h"
#include "libs/graph/stage_writer.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/local_cluster.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/local_port.h"
#include "tests/support/plans.h"
#include "tests/support/test_env.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

constexpr int kSamples = 16;  // tests/models/export_models.py: TRAIN_SAMPLES
constexpr int kEpochs = 2;
constexpr int kBatch = 8;

struct RunConfig {
  int micro_batches = 1;
  std::string schedule = "gpipe";
};

// As the fidelity matrix's job: kSamples samples over kEpochs epochs, shuffled, Adam.
std::string job_text(const test::ModelFiles& files, const RunConfig& c) {
  return "[train]\nepochs = " + std::to_string(kEpochs) + "\nbatch_size = " +
         std::to_string(kBatch) + "\nmicro_batches = " + std::to_string(c.micro_batches) +
         "\nschedule = \"" + c.schedule +
         "\"\nseed = 11\n\n[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file +
         "\"\n\n[loss]\nname = \"" + files.loss +
         "\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n";
}

// `random_stages`: stages that draw random numbers, at least (with 2 or more the generator's
// state travels between them); `shared`: every plan puts a tensor on several stages, whose
// gradients are then summed over a ring.
void check_model(const std::string& name, const std::vector<int>& stage_counts,
                 const std::vector<RunConfig>& configs, size_t random_stages = 0,
                 bool shared = false) {
  const test::ModelFiles files = test::model_files(name);
  const auto initial = training::state_of(torch::jit::load(files.model));
  std::map<int, training::ReferenceResult> references;  // by micro-batches
  for (int stages : stage_counts) {
    const auto cuts = test::LocalCluster::even_cuts(files.model, stages);
    test::InProcessCluster cluster(files, cuts);
    // At least `random_stages` with 1.13's export of the zoo; PyTorch 2.x writes attention as one
    // scaled_dot_product_attention, and the even cuts can leave every draw in one stage there.
    if (torch_support::kTorchMajor < 2) {
      CHECK(cluster.metadata().front().random_nodes.size() >= random_stages);
    }
    const bool plan_shares = std::any_of(
        cluster.metadata().begin(), cluster.metadata().end(),
        [](const config::NodeMetadata& node) { return !node.shared_parameters.empty(); });
    if (shared) CHECK(plan_shares);
    for (const auto& c : configs) {
      INFO(name << " over " << stages << " stages, batch " << kBatch << " in " << c.micro_batches
                << " micro-batch(es), " << c.schedule);
      const config::JobSpec job = config::parse_job(job_text(files, c), "test job");
      auto ref = references.find(c.micro_batches);
      if (ref == references.end()) {
        ref = references.emplace(c.micro_batches, training::train_reference(files.model, job)).first;
        REQUIRE(ref->second.updates == kEpochs * ((kSamples + kBatch - 1) / kBatch));
      }
      const auto trained = cluster.train(job);
      const auto d = test::compare_state(trained.state, ref->second.state, initial);
      INFO("largest difference " << d.worst << " in " << d.name << "; training moved weights by "
                                 << d.moved);
      CHECK(d.worst <= 1e-5);
      CHECK(d.moved > 1e-3);  // the comparison is not between two untouched copies
      CHECK((trained.rings > 0) == plan_shares);
      REQUIRE(trained.losses.size() == ref->second.batch_losses.size());
      for (size_t b = 0; b < trained.losses.size(); ++b) {
        CHECK(std::abs(trained.losses[b] - ref->second.batch_losses[b]) <= 1e-5);
      }
    }
  }
}

const std::vector<RunConfig> kAllConfigs = {
    {1, "gpipe"}, {2, "gpipe"}, {2, "1f1b"}, {4, "gpipe"}, {4, "1f1b"}};

}  // namespace

TEST_CASE("stage worker: small_cnn (BatchNorm, dropout)", "[stage_worker]") {
  check_model("small_cnn", {2, 3}, {{1, "gpipe"}});
}

TEST_CASE("stage worker: char_lm ([N, T, V] logits; padding: micro-batches weigh their tokens)",
          "[stage_worker]") {
  check_model("char_lm", {2, 3}, {{1, "gpipe"}, {3, "1f1b"}});
}

TEST_CASE("stage worker: char_lm validation: token accuracy a number, equal to one process",
          "[stage_worker]") {
  const test::ModelFiles files = test::model_files("char_lm");
  test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, 3));
  // Validation on the training file (padded labels) after every epoch, micro-batches of 3, 3, 2.
  std::string text = job_text(files, {3, "1f1b"});
  text.replace(text.find("\n\n[loss]"), 0, "\nvalidation = \"" + files.train_file + "\"");
  const config::JobSpec job = config::parse_job(text, "test job");
  const auto reference = training::train_reference(files.model, job);
  const auto trained = cluster.train(job);
  REQUIRE(trained.validations.size() == reference.validations.size());
  REQUIRE(!trained.validations.empty());
  for (size_t i = 0; i < trained.validations.size(); ++i) {
    const auto& got = trained.validations[i];
    const auto& expected = reference.validations[i].result;
    REQUIRE(std::isfinite(got.accuracy));
    CHECK(got.accuracy == Approx(expected.accuracy).margin(1e-12));
    CHECK(std::abs(got.loss - expected.loss) <= 1e-5);
  }
}

TEST_CASE("stage worker: dropout_twice (the random state travels)", "[stage_worker]") {
  check_model("dropout_twice", {2, 3}, kAllConfigs, 2);
}

TEST_CASE("stage worker: reused (a parameter on two stages, summed over a ring)",
          "[stage_worker]") {
  check_model("reused", {2, 3}, {{1, "gpipe"}, {2, "1f1b"}, {4, "gpipe"}}, 0, true);
}

TEST_CASE("stage worker: transformer (encoder with dropout)", "[stage_worker]") {
  check_model("transformer", {2, 3}, {{2, "gpipe"}, {4, "1f1b"}}, 2);
}

// The comparison can fail: one node that updates every second batch while the others update
// every batch trains something else, and the difference shows.
TEST_CASE("stage worker: wrong_update_frequency on one node is seen", "[stage_worker]") {
  const test::ModelFiles files = test::model_files("dropout_twice");
  test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, 2));
  const config::JobSpec job = config::parse_job(job_text(files, {2, "gpipe"}), "test job");
  const auto reference = training::train_reference(files.model, job);
  const auto trained = cluster.train(job, [](worker::JobSetup& made) {
    auto& setup = made.common;
    if (setup.node.position == 0) setup.update_frequency = 2;
  });
  const auto d = test::compare_state(trained.state, reference.state,
                         training::state_of(torch::jit::load(files.model)));
  INFO("largest difference " << d.worst << " in " << d.name);
  CHECK(d.worst > 1e-3);
}

// A device out of memory in a stage's forward (here its text, as the TorchScript interpreter
// passes LibTorch's c10::OutOfMemoryError on) fails the job in one line naming the node, the
// device and the micro-batch, like any other error: the worker stops, nothing crashes.
TEST_CASE("stage worker: out_of_memory names the node, the device and the step",
          "[stage_worker]") {
  const test::ModelFiles files = test::model_files("small_cnn");
  test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, 2));
  const config::JobSpec job = config::parse_job(job_text(files, {2, "gpipe"}), "test job");
  std::string leaf;
  try {
    cluster.train(job, [&](worker::JobSetup& made) {
      auto& setup = made.common;
      if (!setup.node.returns_model_output) return;
      leaf = setup.node.name;
      torch::jit::Module stage("OutOfMemoryStage");
      stage.register_attribute("training", c10::BoolType::get(), true);
      std::string args;
      for (size_t i = 0; i < setup.node.inputs.size(); ++i) {
        args += ", x" + std::to_string(i) + ": Any";  // not all of them are tensors
      }
      stage.define("def forward(self" + args +
                   "):\n  assert False, 'CUDA out of memory. Tried to allocate 2.00 GiB. "
                   "GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.'\n");
      setup.stage = std::make_shared<stage::TorchScriptStage>(stage);
    });
    FAIL("the job did not fail");
  } catch (const std::runtime_error& e) {
    const std::string error = e.what();
    INFO(error);
    CHECK(error.find('\n') == std::string::npos);
    CHECK(error.find(leaf + ": cpu out of memory during forward of micro-batch 0 of batch 0 "
                            "(tried to allocate 2.00 GiB)") != std::string::npos);
  }
}
