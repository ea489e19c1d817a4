// The parameter-server and hybrid modes in one process (InProcessPlan over LocalPort,
// tests/support/in_process_cluster.h): the plan `ravnest clusterize --mode ps|hybrid` writes,
// every node's worker (servers, evaluator, workers) made by make_job_worker from a NodeStore as
// in a daemon, only the sockets missing. Synchronous training is compared with the same
// single-process references the daemons' tests use (tests/integration/test_parameter_server.cpp,
// test_hybrid.cpp): the fast, process-free counterpart of those.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/job/job_spec.h"
#include "libs/graph/clusterize.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/in_process_cluster.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

config::JobSpec load_job(const test::TempDir& dir, const std::string& text) {
  const auto path = dir / "job.toml";
  test::write_text(path, text);
  return config::load_job(path.string());
}

std::string ps_job(const std::string& ps) {
  return "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 2\nseed = 5\n"
         "\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() + "\"\nvalidation = \"" +
         (test::digits_dir() / "digits_val.csv").string() + "\"\n" +
         "label_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n"
         "\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n"
         "\n[scheduler]\nname = \"step\"\nstep_size = 1\ngamma = 0.5\nper = \"epoch\"\n" + ps;
}


std::string hybrid_job(const std::string& sparse) {
  const auto dir = test::hybrid_dir().string();
  return "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 2\nseed = 3\n"
         "reduce = \"gradients\"\n"
         "\n[data]\nformat = \"tensors\"\ntrain = \"" + dir + "/train.pt\"\nvalidation = \"" +
         dir + "/val.pt\"\nnum_classes = 8\n"
         "\n[loss]\nname = \"script\"\npath = \"" + dir + "/loss.pt\"\n"
         "\n[optimizer]\nname = \"adam\"\nlr = 0.01\n"
         "\n[scheduler]\nname = \"step\"\nstep_size = 1\ngamma = 0.5\nper = \"epoch\"\n" + sparse;
}

size_t events_of(const test::InProcessPlan::Trained& trained, wire::EventKind kind) {
  size_t n = 0;
  for (const auto& e : trained.events) n += e.kind == kind;
  return n;
}

}  // namespace

TEST_CASE("parameter servers in one process: synchronous equals one process on the workers' "
          "average gradient",
          "[ps][exact]") {
  // 6 alike nodes: 2 servers (the lowest ids), the evaluator, 3 workers.
  test::InProcessPlan plan(6, [](const std::string& pool, const std::string& dir) {
    graph::ClusterizeOptions options;
    options.model_path = test::digits_model();
    options.nodes_path = pool;
    options.example_inputs = {"32x1x8x8"};
    options.out_dir = dir;
    options.mode = graph::PlanMode::kParameterServer;
    options.parameter_servers = {2, true};
    graph::clusterize(options, [](const std::string&) {});
  });
  test::TempDir dir;
  const auto job = load_job(dir, ps_job("\n[ps]\nmode = \"sync\"\neval_freq = 4\n"));
  const auto trained = plan.train(job);
  // Every node finished; the evaluator scored along the way and at the end.
  CHECK(events_of(trained, wire::EventKind::kFinished) == 6);
  CHECK(events_of(trained, wire::EventKind::kValidation) >= 2);

  auto as_one_process = job;
  as_one_process.train.reduce = config::ReduceMode::kGradients;
  const auto reference =
      training::train_reference_clusters(test::digits_model(), as_one_process, 3);
  const auto initial = training::state_of(torch::jit::load(test::digits_model()));
  int workers = 0;
  for (const auto& node : plan.metadata()) {
    if (node.role != config::Role::kWorker) continue;
    ++workers;
    // A worker ends with the servers' weights and their averaged buffers: the whole model.
    std::string where;
    const double diff = test::largest_difference(reference.state, trained.stages.at(node.node_id),
                                                 &where);
    INFO(node.name << ": largest difference from one process " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    CHECK(test::largest_difference(initial, trained.stages.at(node.node_id), &where) > 1e-3);
  }
  CHECK(workers == 3);
}

TEST_CASE("a hybrid in one process: synchronous equals one process with the table stepping on "
          "its looked-up rows",
          "[hybrid][exact]") {
  // Node 0 serves the table, nodes 1 and 2 train.
  test::InProcessPlan plan(3, [](const std::string& pool, const std::string& dir) {
    graph::ClusterizeOptions options;
    options.model_path = (test::hybrid_dir() / "hybrid.pt").string();
    options.nodes_path = pool;
    options.example_inputs = {"16x8:int64:100"};
    options.out_dir = dir;
    options.mode = graph::PlanMode::kHybrid;
    options.on_server = {"emb"};
    graph::clusterize(options, [](const std::string&) {});
  });
  const std::string model = (test::hybrid_dir() / "hybrid.pt").string();
  for (const std::string sparse : {"\n[sparse_optimizer]\nname = \"sparse_adam\"\nlr = 0.05\n",
                                   "\n[sparse_optimizer]\nname = \"sgd\"\nlr = 0.5\n"}) {
    INFO(sparse);
    test::TempDir dir;
    const auto job = load_job(dir, hybrid_job(sparse));
    const auto trained = plan.train(job);
    CHECK(events_of(trained, wire::EventKind::kFinished) == 3);
    // The trainers' dense part and the server's table, as fuse takes them.
    std::map<std::string, at::Tensor> state = trained.stages.at(1);
    REQUIRE(trained.stages.at(0).count("emb.weight"));
    REQUIRE_FALSE(state.count("emb.weight"));  // the trainer's placeholder is empty
    state["emb.weight"] = trained.stages.at(0).at("emb.weight");
    const auto reference =
        training::train_reference_clusters(model, job, 2, -1, {{"emb.weight", 0}});
    std::string where;
    const double diff = test::largest_difference(reference.state, state, &where);
    INFO("largest difference from one process: " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    // Both trainers end alike (their dense gradients are reduced over the ring).
    CHECK(test::largest_difference(trained.stages.at(1), trained.stages.at(2), &where) <= 1e-6);
    // The comparison tells: the table trained densely by [optimizer] ends elsewhere.
    const auto dense = training::train_reference_clusters(model, job, 2);
    CHECK(test::largest_difference(dense.state, state, &where) > 1e-4);
  }
}
