// The asynchronous schedule (docs/async.md) in one process (InProcessCluster over LocalPort):
//   - with max_in_flight = 1 nothing is ever in flight across an update: it equals the
//     synchronous run (1e-6);
//   - with one stage, forward and backward are never apart: it equals one process;
//   - with more in flight it trains something else (async is not exact), but every backward ran
//     on the weights its forward ran on (recorded checksums, recomputed on the stashed version
//     when an update came between), staleness stays below max_in_flight, and at most
//     max_in_flight - 1 old versions are kept;
//   - a plan that puts a tensor on several stages is refused, by the requester's check and by
//     the node.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "libs/stage/torchscript_stage.h"
#include "libs/base/config_error.h"
#include "libs/config/job/job_plan_check.h"
#include "libs/config/job/job_spec.h"
#include "libs/worker/pipeline/weight_stash.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/local_cluster.h"
#include "tests/support/zoo.h"

using namespace ravnest;

namespace {

constexpr int kEpochs = 2;
constexpr int kBatch = 8;

std::string job_text(const test::ModelFiles& files, int micro_batches, const std::string& schedule,
                     int max_in_flight = 0, const std::string& optimizer = "adam") {
  std::string text = "[train]\nepochs = " + std::to_string(kEpochs) + "\nbatch_size = " +
                     std::to_string(kBatch) + "\nmicro_batches = " + std::to_string(micro_batches) +
                     "\nschedule = \"" + schedule + "\"\nseed = 11\n";
  if (max_in_flight > 0) text += "max_in_flight = " + std::to_string(max_in_flight) + "\n";
  return text + "\n[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file +
         "\"\n\n[loss]\nname = \"" + files.loss + "\"\n\n[optimizer]\nname = \"" + optimizer +
         "\"\nlr = 0.01\n";
}

config::JobSpec job_of(const std::string& text) { return config::parse_job(text, "job.toml"); }

}  // namespace

TEST_CASE("async: max_in_flight = 1 equals the synchronous run", "[async]") {
  for (const std::string name : {"small_cnn", "dropout_twice", "lstm"}) {
    const auto files = test::model_files(name);
    const auto initial = training::state_of(torch::jit::load(files.model));
    for (int stages : {2, 3}) {
      INFO(name << " over " << stages << " stages");
      test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, stages));
      const auto sync = cluster.train(job_of(job_text(files, 4, "gpipe")));
      const auto async = cluster.train(job_of(job_text(files, 4, "async", 1)));
      std::map<std::string, at::Tensor> reference;
      for (const auto& [n, t] : sync.state) reference.emplace(n, t);
      const auto d = test::compare_state(async.state, reference, initial);
      INFO("largest difference " << d.worst << " in " << d.name);
      CHECK(d.worst <= 1e-6);
      CHECK(d.moved > 1e-3);
      REQUIRE(async.losses.size() == sync.losses.size());
      for (size_t b = 0; b < sync.losses.size(); ++b) {
        CHECK(std::abs(async.losses[b] - sync.losses[b]) <= 1e-6);
      }
    }
  }
}

TEST_CASE("async: one stage equals one process", "[async]") {
  const auto files = test::model_files("small_cnn");
  const auto job = job_of(job_text(files, 4, "async", 4));
  const auto reference = training::train_reference(files.model, job);
  test::InProcessCluster cluster(files, {});
  const auto trained = cluster.train(job);
  const auto d = test::compare_state(trained.state, reference.state,
                                     training::state_of(torch::jit::load(files.model)));
  INFO("largest difference " << d.worst << " in " << d.name);
  CHECK(d.worst <= 1e-5);
  CHECK(d.moved > 1e-3);
}

TEST_CASE("async: every backward runs on its forward's weights; staleness is bounded",
          "[async]") {
  // BatchNorm and dropout late (small_cnn), dropout in the first and the last stage
  // (dropout_twice: every recomputation must draw what its forward drew); 3 stages, 4
  // micro-batches a batch, SGD (every update changes every weight).
  const std::string model = GENERATE(as<std::string>{}, "small_cnn", "dropout_twice");
  INFO("model " << model);
  const auto files = test::model_files(model);
  const auto initial = training::state_of(torch::jit::load(files.model));
  test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, 3));
  for (int max_in_flight : {2, 3, 6}) {
    INFO("max_in_flight " << max_in_flight);
    const auto job = job_of(job_text(files, 4, "async", max_in_flight, "sgd"));
    const auto trained =
        cluster.train(job, [](worker::JobSetup& setup) {
          std::get<worker::StageWorker::Options>(setup.role).record_versions = true;
        });
    size_t stale = 0, records = 0;
    for (const auto& [node, list] : trained.records) {
      for (const auto& r : list) {
        INFO("node " << node << ", batch " << r.step << " micro-batch " << r.index);
        ++records;
        CHECK(r.current_version >= r.forward_version);
        CHECK(r.current_version - r.forward_version <= static_cast<uint64_t>(max_in_flight - 1));
        // The weights the backward ran on are those of its forward, to the last bit.
        CHECK(r.backward_checksum == r.forward_checksum);
        if (r.current_version > r.forward_version) ++stale;
      }
      CHECK(trained.most_versions_kept.at(node) <= static_cast<size_t>(max_in_flight - 1));
    }
    // Two non-leaf stages, 2 epochs of 2 batches of 4 micro-batches each.
    CHECK(records == 2 * 2 * 2 * 4);
    CHECK(stale > 0);  // updates did come between forwards and backwards
    // Not the synchronous training: the difference shows.
    const auto sync = cluster.train(job_of(job_text(files, 4, "gpipe", 0, "sgd")));
    std::map<std::string, at::Tensor> reference;
    for (const auto& [n, t] : sync.state) reference.emplace(n, t);
    const auto d = test::compare_state(trained.state, reference, initial);
    CHECK(d.worst > 1e-6);
    CHECK(std::all_of(trained.losses.begin(), trained.losses.end(),
                      [](double loss) { return std::isfinite(loss); }));
  }
}

TEST_CASE("async: a tensor on several stages is refused", "[async]") {
  const auto files = test::model_files("reused");
  test::InProcessCluster cluster(files, test::LocalCluster::even_cuts(files.model, 2));
  const auto job = job_of(job_text(files, 2, "async"));
  std::string why;
  try {
    config::check_job_for_plan(job, cluster.metadata(), "job.toml");
  } catch (const base::ConfigError& e) {
    why = e.what();
  }
  CHECK(why.rfind("job.toml: train.schedule: \"async\" cannot train ", 0) == 0);
  CHECK(why.find(" hold (tied or reused weights): use \"gpipe\" or \"1f1b\", or plan other cuts") !=
        std::string::npos);
  // The node refuses it too.
  CHECK_THROWS_WITH(cluster.train(job), Catch::Contains("\"async\" cannot train"));
  // Synchronous schedules are fine with it.
  config::check_job_for_plan(job_of(job_text(files, 2, "1f1b")), cluster.metadata(), "job.toml");
}

TEST_CASE("WeightStash: a stale backward gets the gradient of the weights it ran on", "[stash]") {
  // BatchNorm: the recomputation must not move the stage's running statistics either.
  const auto files = test::model_files("traced_mlp");
  torch::jit::Module stage = torch::jit::load(files.model);
  stage.train(true);
  const at::Tensor x = torch::randn({6, 20}, at::TensorOptions().dtype(at::kFloat));
  auto run = [&](auto& m) { m.forward({x}).toTensor().pow(2).sum().backward(); };

  // A copy made with autograd on would hold non-leaf tensors, whose .grad stays empty.
  torch::jit::Module reference = [&] {
    torch::NoGradGuard no_grad;
    return stage.deepcopy();
  }();
  for (auto p : reference.parameters()) p.requires_grad_(true);
  run(reference);  // the gradient on version 0's weights

  worker::WeightStash stash(std::make_shared<stage::TorchScriptStage>(stage));
  stash.hold(0);
  stash.before_update();
  {
    torch::NoGradGuard no_grad;
    for (auto p : stage.parameters()) p.add_(0.5);  // an update in place: version 1
  }
  stash.after_update();
  CHECK(stash.versions_kept() == 1);
  std::vector<at::Tensor> buffers_before;
  for (const auto& b : stage.buffers()) buffers_before.push_back(b.clone());
  const double current = stash.checksum();

  double ran_on = 0;
  stash.with_version(0, [&](stage::Stage& m) {
    ran_on = worker::WeightStash::checksum(m);
    run(m);
  });
  CHECK(ran_on == worker::WeightStash::checksum(stage::TorchScriptStage(reference)));
  CHECK(stash.checksum() == current);  // the stage keeps version 1's weights
  auto want = reference.named_parameters().begin();
  for (const auto& p : stage.named_parameters()) {
    INFO(p.name);
    REQUIRE(p.value.grad().defined());
    CHECK(p.value.grad().equal((*want).value.grad()));
    ++want;
  }
  size_t i = 0;
  for (const auto& b : stage.buffers()) CHECK(b.equal(buffers_before[i++]));

  // Gradients add up, as accumulation over micro-batches needs; the shadow keeps none.
  stash.with_version(0, run);
  for (const auto& p : stage.named_parameters()) {
    const at::Tensor once = reference.attr(p.name.substr(0, p.name.find('.')))
                                .toModule()
                                .attr(p.name.substr(p.name.find('.') + 1))
                                .toTensor()
                                .grad();
    CHECK(torch::allclose(p.value.grad(), 2 * once, 1e-5, 1e-6));
  }
  stash.release(0);
  CHECK(stash.versions_kept() == 0);
  CHECK_THROWS_AS(stash.with_version(0, run), std::logic_error);
}
