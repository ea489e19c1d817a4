// The hybrid (docs/parameter-server.md#hybrid) on real daemons: seed 004's model with its
// EmbeddingBag on a server and the rest data-parallel over two trainers. Synchronous training is
// compared with one process (training::train_reference_clusters with the table stepping apart on
// the rows looked up, as the server steps it).
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/graph/clusterize.h"
#include "libs/graph/sparse_tables.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {


std::string model() { return (test::hybrid_dir() / "hybrid.pt").string(); }

void as_hybrid_plan(const test::LocalCluster& cluster) {
  graph::ClusterizeOptions options;
  options.model_path = model();
  options.nodes_path = cluster.pool_file();
  options.example_inputs = {"16x8:int64:100"};
  options.out_dir = cluster.plan_dir();
  options.mode = graph::PlanMode::kHybrid;
  options.on_server = {"emb"};
  graph::clusterize(options, [](const std::string&) {});
}

std::string job_text(const std::string& sparse, const std::string& extra_train = "") {
  const auto dir = test::hybrid_dir().string();
  return "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 2\nseed = 3\n"
         "reduce = \"gradients\"\n" + extra_train +
         "\n[data]\nformat = \"tensors\"\ntrain = \"" + dir + "/train.pt\"\nvalidation = \"" +
         dir + "/val.pt\"\nnum_classes = 8\n"
         "\n[loss]\nname = \"script\"\npath = \"" + dir + "/loss.pt\"\n"
         "\n[optimizer]\nname = \"adam\"\nlr = 0.01\n"
         "\n[scheduler]\nname = \"step\"\nstep_size = 1\ngamma = 0.5\nper = \"epoch\"\n" + sparse;
}

}  // namespace

TEST_CASE("a synchronous hybrid equals one process with the table stepping on its looked-up rows",
          "[hybrid][exact]") {
  // Node 0 serves the table (the pool's nodes are alike: the lowest id), nodes 1 and 2 train.
  test::LocalCluster cluster(model(), {{}, {}, {}}, {"16x8:int64:100"});
  as_hybrid_plan(cluster);
  const auto trainer = config::load_node_metadata(config::PlanLayout(cluster.plan_dir()).node_file(1));
  REQUIRE(trainer.parameter_server.hybrid());
  CHECK(std::find(trainer.parameters.begin(), trainer.parameters.end(), "emb.weight") ==
        trainer.parameters.end());
  CHECK_FALSE(trainer.rings.empty());
  // The trainer's stage holds no table, only an empty placeholder.
  auto stage = torch::jit::load(config::PlanLayout(cluster.plan_dir()).resolve(trainer.stage_file));
  CHECK(stage.attr("emb").toModule().attr("weight").toTensor().size(0) == 0);

  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  for (const std::string sparse :
       {"\n[sparse_optimizer]\nname = \"sparse_adam\"\nlr = 0.05\n",
        "\n[sparse_optimizer]\nname = \"adagrad\"\nlr = 0.1\nlr_decay = 0.01\n"
        "initial_accumulator_value = 0.1\n",
        "\n[sparse_optimizer]\nname = \"sgd\"\nlr = 0.5\n"}) {
    INFO(sparse);
    const auto job_path = cluster.dir() / "job.toml";
    test::write_text(job_path, job_text(sparse));
    auto train = cluster.ravnest("train", job_path.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    CHECK(std::regex_search(train.out, std::regex("cluster 1 validation: loss [0-9.]+, accuracy")));
    auto fuse = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    const auto trained = test::load_state_dict(cluster.dir() / "trained" / "trained_state_dict.pt");
    const auto job = config::load_job(job_path.string());
    const auto reference = training::train_reference_clusters(model(), job, 2, -1, {{"emb.weight", 0}});
    std::string where;
    const double diff = test::largest_difference(reference.state, trained, &where);
    INFO("largest difference from one process: " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    // The comparison tells: the table trained densely by [optimizer] instead ends elsewhere.
    const auto dense = training::train_reference_clusters(model(), job, 2);
    CHECK(test::largest_difference(dense.state, trained, &where) > 1e-4);
    // The table moved, and only where it was looked up (every row here is, over two epochs).
    const auto initial = training::state_of(torch::jit::load(model()));
    CHECK((initial.at("emb.weight") - trained.at("emb.weight")).abs().max().item<double>() > 1e-3);
  }

  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(std::regex_search(status.out, std::regex("node_0 .* server +finished")));
  CHECK(std::regex_search(status.out, std::regex("node_2 .* worker +finished")));
}

TEST_CASE("a hybrid job needs its sparse optimizer and a synchronous schedule", "[hybrid]") {
  test::LocalCluster cluster(model(), {{}, {}, {}}, {"16x8:int64:100"});
  as_hybrid_plan(cluster);
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(""));
  auto train = cluster.ravnest("train", job_path.string());
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("sparse_optimizer: the plan's servers hold emb.weight") != std::string::npos);
  test::write_text(job_path, job_text("\n[sparse_optimizer]\nname = \"sgd\"\nlr = 0.1\n",
                                      "schedule = \"async\"\n"));
  train = cluster.ravnest("train", job_path.string());
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("train.schedule: a hybrid plan's trainers run") != std::string::npos);
}

TEST_CASE("only embeddings looked up straight from a model input can live on a server",
          "[hybrid][errors]") {
  test::TempDir dir;
  auto made = test::run_command(test::python() + " " + test::source_dir() +
                                "/tests/python/hybrid_refusals.py " + dir.path().string());
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto refusal = [&](const std::string& name, const std::vector<std::string>& tables) {
    auto model = graph::ModelGraph::load((dir / (name + ".pt")).string());
    try {
      graph::find_sparse_tables(*model, tables);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal("computed", {"emb"}) ==
        "--on-server emb: its indices are computed inside the model; a server's table needs "
        "them straight from a model input");
  CHECK(refusal("also_dense", {"emb"}).find("--on-server emb: its indices (the model's input "
                                            "indices) are also used by") == 0);
  CHECK(refusal("renormed", {"emb"}).find("--on-server emb: has max_norm") == 0);
  CHECK(refusal("padded", {"emb"}).find("--on-server emb: has a padding_idx") == 0);
  CHECK(refusal("matmul", {"emb"}).find("--on-server emb: its weight is used densely by") == 0);
  CHECK(refusal("two_inputs", {"users", "items"}).empty());
  auto model = graph::ModelGraph::load((dir / "two_inputs.pt").string());
  const auto tables = graph::find_sparse_tables(*model, {"items", "users"});
  REQUIRE(tables.size() == 2);
  CHECK(tables[0].weight == "items.weight");
  CHECK(tables[0].index_input == 1);
  CHECK(tables[1].weight == "users.weight");
  CHECK(tables[1].index_input == 0);
  CHECK(tables[1].shape == std::vector<int64_t>{30, 4});
}
