// Models from torch.export trained across daemons, against eager PyTorch (issue 42). The models
// are the test zoo's (tests/models/export_models.py: NAME.pt2 is the same eager module with the
// same weights as NAME.pt, exported with a batch Dim), so they train on the zoo's data.
//
//  - cut: every .pt2 of the zoo cut into 2 and 3 stages (CutModel, the stage writer) gives stage
//    archives that, run as a chain (StageChain), equal the whole archive in outputs, gradients
//    and buffers, over one micro-batch and over two in the daemons' GPipe order (--verify's
//    check); the profile sees every node.
//  - daemons: a few of them trained on real daemons (push, train with several micro-batches,
//    fuse) equal one eager PyTorch process in Python (tests/python/reference_train.py runs the
//    archive as torch.export.load(...).module(), the ATen ops one by one) to 1e-5 with SGD; the
//    fused model.pt2 and every stage archive load in Python with torch.export.load. Two clusters
//    over rings (each its own shard) equal one process emulating them on the TorchScript twin.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include <torch/csrc/jit/serialization/import.h>

#include "libs/graph/clusterize.h"
#include "libs/graph/cut_model.h"
#include "libs/graph/example_input.h"
#include "libs/graph/stage_chain.h"
#include "libs/graph/stage_writer.h"
#include "libs/stage/stage_file.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"
#include "tests/support/plans.h"
#include "tests/support/test_env.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string pt2_of(const test::ModelFiles& files) {
  return fs::path(files.model).replace_extension(".pt2").string();
}

// Cuts after allowed units spread evenly, as LocalCluster::even_cuts does for any format.
std::vector<size_t> even_cuts(const graph::CutModel& model, int stages) {
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model.cut_allowed().size(); ++i) {
    if (model.cut_allowed()[i]) allowed.push_back(i);
  }
  std::vector<size_t> cuts;
  if (allowed.size() + 1 < static_cast<size_t>(stages)) return cuts;
  for (int k = 1; k < stages; ++k) cuts.push_back(allowed.at(k * allowed.size() / stages));
  return cuts;
}

const std::vector<std::string> kPt2Models = {
    "small_cnn", "transformer", "two_inputs", "multi_output",  "tied",     "causal_lm",
    "lstm",      "dropout_twice", "segmentation", "resnet18", "traced_inplace"};

}  // namespace

TEST_CASE("exported: cut: every zoo .pt2 into 2 and 3 stages equals the whole archive") {
  for (const auto& name : kPt2Models) {
    const test::ModelFiles files = test::model_files(name);
    const std::string path = pt2_of(files);
    INFO(name);
    REQUIRE(fs::exists(path));
    auto model = graph::load_cut_model(path);
    CHECK(model->format() == "torch.export");
    // The zoo's own example batch (two micro-batches of BatchNorm need more than one sample each).
    const auto inputs =
        graph::make_example_inputs({test::models_dir() + "/" + name + ".inputs.pt"}, 0);
    const auto profile = model->profile(inputs);
    CHECK(profile.units.size() == model->unit_count());
    CHECK(profile.total_parameter_bytes() > 0);
    for (int stages : {2, 3}) {
      const auto cuts = even_cuts(*model, stages);
      if (cuts.empty()) continue;
      INFO(stages << " stages");
      test::TempDir dir;
      const auto nodes = test::loopback_nodes(stages);
      auto metadata = graph::write_cluster_stages(
          *model, test::cluster_with_cuts(cuts, model->unit_count()), nodes, dir.path().string());
      REQUIRE(metadata.size() == static_cast<size_t>(stages));
      for (const auto& meta : metadata) {
        CHECK(stage::stage_format_of(dir.path().string() + "/" + meta.stage_file) ==
              stage::StageFormat::kExported);
      }
      for (int micro_batches : {1, 2}) {
        INFO(micro_batches << " micro-batch(es)");
        auto chain = graph::StageChain::load(dir.path().string(), metadata);
        const auto comparison =
            graph::compare_with_model(path, chain, inputs, 7, micro_batches);
        INFO(comparison.failure << " worst: " << comparison.worst);
        CHECK(comparison.failure.empty());
        CHECK(comparison.max() <= 1e-6);
      }
    }
  }
}

namespace {

constexpr int kEpochs = 2;

// The zoo's training set over kEpochs epochs, shuffled, one SGD step per batch.
std::string job_text(const test::ModelFiles& files, int micro_batches, const std::string& schedule) {
  return "[train]\nepochs = " + std::to_string(kEpochs) +
         "\nbatch_size = 8\nmicro_batches = " + std::to_string(micro_batches) +
         "\nschedule = \"" + schedule + "\"\nseed = 11\n\n[data]\nformat = \"tensors\"\ntrain = \"" +
         files.train_file + "\"\n\n[loss]\nname = \"" + files.loss +
         "\"\n\n[optimizer]\nname = \"sgd\"\nlr = 0.05\n";
}

struct DaemonCase {
  std::string name;
  int stages = 2;
  int clusters = 1;
  int micro_batches = 2;
  std::string schedule = "gpipe";
};

// Trains the .pt2 of `c.name` on daemons and compares the fused state dict with eager PyTorch
// in Python on the same job; the fused model.pt2 and the stages load with torch.export.load.
void train_against_eager(const DaemonCase& c) {
  const test::ModelFiles files = test::model_files(c.name);
  const std::string path = pt2_of(files);
  INFO(c.name << " over " << c.stages << " stages x " << c.clusters << " cluster(s), "
              << c.micro_batches << " micro-batch(es), " << c.schedule);
  const auto cuts = test::LocalCluster::even_cuts(path, c.stages);
  REQUIRE(cuts.size() == static_cast<size_t>(c.stages - 1));
  test::LocalCluster cluster(path, std::vector<std::vector<size_t>>(c.clusters, cuts),
                             files.example_inputs);
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  const auto out_dir = cluster.dir() / "trained";
  test::write_text(job_path, job_text(files, c.micro_batches, c.schedule));
  REQUIRE_NOTHROW(cluster.train_and_fuse(job_path.string(), out_dir.string()));
  const auto trained = test::load_state_dict(out_dir / "trained_state_dict.pt");
  const auto initial = test::load_state_dict(test::models_dir() + "/" + c.name + ".state_dict.pt");

  if (c.clusters > 1) {
    // Each cluster trains its own shard and the rings average: one process emulates that on the
    // TorchScript twin (same eager module, same weights; libs/training/reference_trainer.h).
    const auto reference = training::train_reference_clusters(
        files.model, config::load_job(job_path.string()), c.clusters);
    const auto d = test::compare_state({trained.begin(), trained.end()}, reference.state, initial);
    INFO("against one process emulating the clusters: largest difference "
         << d.worst << " in " << d.name << "; training moved weights by " << d.moved);
    CHECK(d.worst <= 1e-5);
    CHECK(d.moved > 1e-3);
    return;
  }
  const auto python_out = out_dir / "python_state_dict.pt";
  auto python = test::run_command(test::python() + " " + test::source_dir() +
                                  "/tests/python/reference_train.py " + job_path.string() + " " +
                                  path + " " + python_out.string());
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  const auto d = test::compare_state({trained.begin(), trained.end()},
                                     test::load_state_dict(python_out), initial);
  INFO("against eager PyTorch: largest difference " << d.worst << " in " << d.name
                                                    << "; training moved weights by " << d.moved);
  CHECK(d.worst <= 1e-5);
  CHECK(d.moved > 1e-3);

  // What a user inspects in Python: the fused whole and a stage, as torch.export.load reads them.
  const std::string stage_file =
      cluster.plan_dir() + "/" +
      config::load_node_metadata(cluster.plan_dir() + "/nodes/node_0.json").stage_file;
  auto load = test::run_command(
      test::python() + " -c \"import sys, torch; [torch.export.load(p) for p in sys.argv[1:]]; "
                       "print('loaded')\" " + (out_dir / "model.pt2").string() + " " + stage_file);
  INFO(load.out << load.err);
  CHECK(load.exit_code == 0);
}

}  // namespace

TEST_CASE("exported: daemons: .pt2 models trained over daemons equal eager PyTorch") {
  // BatchNorm and in-place ReLUs over 2 stages, several micro-batches in both schedules; dropout
  // in two stages (the generator's state travels); tied weights across 3 stages; a causal
  // language model with its mask buffer; a U-Net-like skip and a dict output (BatchNorm: one
  // micro-batch); a transformer in two clusters over rings (no BatchNorm: each cluster's half of
  // the batch averaged is the whole batch's gradient).
  train_against_eager({"small_cnn", 2, 1, 2, "1f1b"});
  train_against_eager({"dropout_twice", 2, 1, 4, "gpipe"});
  train_against_eager({"tied", 3, 1, 2, "gpipe"});
  train_against_eager({"causal_lm", 3, 1, 2, "1f1b"});
  train_against_eager({"segmentation", 2, 1, 1, "gpipe"});
  train_against_eager({"transformer", 2, 2, 2, "gpipe"});
}

// What cannot be trained is refused at clusterize, one line each, nothing written: a static
// batch the example or micro-batches would change; a hybrid plan of a .pt2 (its tables are
// TorchScript attributes); a file of neither format. A static batch equal to the example's plans, and verify says why it skips the
// micro-batches.
TEST_CASE("exported: refusals: clusterize refuses what a .pt2 cannot train, in one line") {
  test::TempDir dir;
  const std::string stat = (dir / "static.pt2").string();
  auto exported = test::run_command(
      test::python() + " -c \"import sys, torch; sys.path.insert(0, '" + test::source_dir() +
      "/tests/models'); from small_cnn import SmallCNN; torch.manual_seed(0); "
      "m = SmallCNN(num_classes=10).train(); "
      "torch.export.save(torch.export.export(m, (torch.randn(16, 1, 8, 8),)), sys.argv[1])\" " +
      stat);
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  test::write_text(dir / "nodes.json",
                   "{\"0\": {\"IP\": \"127.0.0.1:1\", \"benchmarks\": {\"ram\": 4, \"bandwidth\": 100}},"
                   " \"1\": {\"IP\": \"127.0.0.1:2\", \"benchmarks\": {\"ram\": 4, \"bandwidth\": 100}}}");
  const std::string ravnest = test::binary_dir() + "/apps/ravnest/ravnest clusterize ";
  const std::string common = " --nodes " + (dir / "nodes.json").string() +
                             " --no-memory-probe --out " + (dir / "plan").string();
  auto one_line_refusal = [&](const std::string& args, const std::string& expected) {
    auto run = test::run_command(ravnest + args + common);
    INFO(args << "\n" << run.out << run.err);
    CHECK(run.exit_code != 0);
    CHECK(run.err.find(expected) != std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
    CHECK(!fs::exists(dir / "plan" / "plan.json"));
  };
  one_line_refusal(stat + " --stages 2 --example-input 8x1x8x8:float32",
                   "exported with batch 16; the example input has 8 samples");
  one_line_refusal(stat + " --stages 2 --example-input 16x1x8x8:float32 --schedule gpipe "
                          "--micro-batches 4",
                   "micro-batches of 4 need dynamic_shapes with a batch Dim");
  one_line_refusal(pt2_of(test::model_files("small_cnn")) +
                       " --example-input 16x1x8x8:float32 --mode hybrid --on-server conv1",
                   "--mode hybrid takes a TorchScript model");
  test::write_text(dir / "text.pt2", "not a model\n");
  one_line_refusal((dir / "text.pt2").string() + " --example-input 16x1x8x8:float32", "text.pt2");

  auto planned = test::run_command(ravnest + stat + " --stages 2 --example-input 16x1x8x8:float32 --verify" + common);
  INFO(planned.out << planned.err);
  CHECK(planned.exit_code == 0);
  CHECK(planned.out.find("exported with a static batch of 16") != std::string::npos);
  CHECK(planned.out.find("skipped, the model runs at its exported batch of 16 only") !=
        std::string::npos);
}

// A parameter-server plan of a .pt2 (every node holds the whole archive; the servers their
// shards): the digits CNN exported by examples/digits/export_model.py (the weights of the
// TorchScript digits model), 1 server and 2 workers, synchronous, against one process stepping
// on the workers' average gradient (training::train_reference_clusters on the TorchScript twin).
TEST_CASE("exported: ps: a .pt2 trained by parameter servers equals one process") {
  test::TempDir dir;
  auto exported = test::run_command(test::python() + " " + test::source_dir() +
                                    "/examples/digits/export_model.py --out " + dir.path().string());
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  const std::string pt2 = (dir / "small_cnn.pt2").string();
  test::LocalCluster cluster(pt2, {{}, {}, {}}, {"32x1x8x8"});
  graph::ClusterizeOptions options;
  options.model_path = pt2;
  options.nodes_path = cluster.pool_file();
  options.example_inputs = {"32x1x8x8"};
  options.out_dir = cluster.plan_dir();
  options.mode = graph::PlanMode::kParameterServer;
  options.parameter_servers = {1, false};
  graph::clusterize(options, [](const std::string&) {});
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path,
                   "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 2\nseed = 5\n\n[data]\n"
                   "format = \"csv\"\ntrain = \"" +
                       (test::digits_dir() / "digits_train.csv").string() +
                       "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
                       "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n"
                       "name = \"sgd\"\nlr = 0.05\n\n[ps]\nmode = \"sync\"\n");
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  auto fuse = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
  INFO(fuse.out << fuse.err);
  REQUIRE(fuse.exit_code == 0);
  const auto trained = test::load_state_dict(cluster.dir() / "trained" / "trained_state_dict.pt");
  auto as_one_process = config::load_job(job_path.string());
  as_one_process.train.reduce = config::ReduceMode::kGradients;
  const auto reference =
      training::train_reference_clusters(test::digits_model(), as_one_process, 2);
  std::string where;
  const double diff = test::largest_difference(reference.state, trained, &where);
  INFO("largest difference from one process: " << diff << " in " << where);
  CHECK(diff <= 1e-5);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained, &where) > 1e-3);
}
