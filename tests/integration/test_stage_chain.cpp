// Chained stages equal the whole model: every test model cut into 1 to 6 stages (evenly spaced
// allowed cuts, and seeded random ones), written to files, wired by their metadata alone, compared
// on forward outputs, every parameter's gradient and BatchNorm buffers; on the whole example batch
// (evenly spaced cuts) and over two micro-batches in GPipe order (both kinds). A stage that overwrites what an earlier
// micro-batch's backward needs passes the first check and fails the second.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include <torch/csrc/jit/api/module.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/graph/example_input.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_chain.h"
#include "libs/graph/stage_writer.h"
#include "tests/support/plans.h"
#include "tests/support/test_env.h"

using namespace ravnest;

namespace {

const char* kModels[] = {"small_cnn", "resnet18",   "resnet50", "mobilenet_v2", "transformer",
                         "two_inputs", "multi_output", "traced_mlp", "tied",       "reused"};



struct Differences {
  double whole = 0, micro = 0;  // on the whole batch; over two micro-batches
  std::string whole_worst, micro_worst;
};

// `whole_batch` false: only the comparison over micro-batches (which checks the same outputs,
// gradients and buffers, on two halves of the batch).
Differences chain_differences(graph::ModelGraph& model, const std::string& name,
                              const std::vector<size_t>& cuts, bool whole_batch = true) {
  test::TempDir dir;
  auto nodes = test::loopback_nodes(static_cast<int>(cuts.size()) + 1);
  auto metadata = graph::write_cluster_stages(model, test::cluster_with_cuts(cuts, model.units().size()),
                                              nodes, dir.path().string());
  graph::write_node_files(metadata, dir.path().string());
  std::vector<config::NodeMetadata> loaded;
  for (const auto& meta : metadata) {
    loaded.push_back(config::load_node_metadata(
        (dir / ("nodes/node_" + std::to_string(meta.node_id) + ".json")).string()));
  }
  auto inputs = graph::make_example_inputs({test::models_dir() + "/" + name + ".inputs.pt"}, 0);
  Differences result;
  if (whole_batch) {
    auto chain = graph::StageChain::load(dir.path().string(), loaded);
    auto whole = graph::compare_with_model(model.path(), chain, inputs, 7);
    result.whole = whole.max();
    result.whole_worst = whole.worst;
  }
  auto fresh = graph::StageChain::load(dir.path().string(), loaded);
  auto micro = graph::compare_with_model(model.path(), fresh, inputs, 7, 2);
  result.micro = micro.max();
  result.micro_worst = micro.worst;
  return result;
}

std::vector<size_t> allowed_boundaries(const graph::ModelGraph& model) {
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model.cut_allowed().size(); ++i) {
    if (model.cut_allowed(i)) allowed.push_back(i);
  }
  return allowed;
}

}  // namespace

TEST_CASE("chained stages equal the whole model, evenly spaced cuts", "[graph][chain]") {
  for (const char* name : kModels) {
    auto model = graph::ModelGraph::load(test::models_dir() + "/" + name + ".pt");
    const auto allowed = allowed_boundaries(*model);
    for (size_t stages = 1; stages <= 6; ++stages) {
      // resnet50 has resnet18's structure at five times the cost: one cut of it is enough.
      if (std::string(name) == "resnet50" && stages != 4) continue;
      if (allowed.size() < stages - 1) {
        WARN(name << ": only " << allowed.size() << " allowed cuts, skipping " << stages);
        continue;
      }
      std::vector<size_t> cuts;
      for (size_t k = 1; k < stages; ++k) cuts.push_back(allowed[k * allowed.size() / stages]);
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      auto diff = chain_differences(*model, name, cuts);
      INFO(name << " in " << stages << " stages: " << diff.whole_worst << " / over micro-batches: "
                << diff.micro_worst);
      CHECK(diff.whole <= 1e-5);
      CHECK(diff.micro <= 1e-5);
    }
  }
}

TEST_CASE("chained stages equal the whole model, random cuts", "[graph][chain]") {
  std::mt19937_64 random(2024);
  for (const char* name : kModels) {
    if (std::string(name) == "resnet50") continue;  // resnet18 has the same structure, 5x cheaper
    auto model = graph::ModelGraph::load(test::models_dir() + "/" + name + ".pt");
    auto allowed = allowed_boundaries(*model);
    for (int trial = 0; trial < 3 && allowed.size() >= 3; ++trial) {
      std::shuffle(allowed.begin(), allowed.end(), random);
      std::vector<size_t> cuts(allowed.begin(), allowed.begin() + 3);
      std::sort(cuts.begin(), cuts.end());
      auto diff = chain_differences(*model, name, cuts, /*whole_batch=*/false);
      INFO(name << " cut after units " << cuts[0] << ", " << cuts[1] << ", " << cuts[2]
                << ", over micro-batches: " << diff.micro_worst);
      CHECK(diff.micro <= 1e-5);
    }
  }
}

TEST_CASE("cuts that a later unit would write through are refused", "[graph]") {
  // torchvision's BasicBlock ends with `out += identity; out = relu(out)` (in place): a cut
  // between the add and the relu would hand the relu a received leaf.
  auto model = graph::ModelGraph::load(test::models_dir() + "/resnet18.pt");
  size_t refused = 0;
  for (size_t u = 0; u + 1 < model->units().size(); ++u) {
    const auto kind = std::string(model->units()[u]->kind().toQualString());
    const auto next = std::string(model->units()[u + 1]->kind().toQualString());
    if (kind == "aten::add_" && next == "aten::relu_") {
      CHECK_FALSE(model->cut_allowed(u));
      ++refused;
    }
  }
  CHECK(refused == 8);  // one per BasicBlock
}

TEST_CASE("a stage file holds only its parameters, under the model's names", "[graph][python]") {
  auto model = graph::ModelGraph::load(test::models_dir() + "/resnet18.pt");
  const auto allowed = allowed_boundaries(*model);
  test::TempDir dir;
  std::vector<size_t> cuts = {allowed[allowed.size() / 3], allowed[2 * allowed.size() / 3]};
  auto metadata = graph::write_cluster_stages(*model, test::cluster_with_cuts(cuts, model->units().size()),
                                              test::loopback_nodes(3), dir.path().string());
  size_t total = 0;
  for (const auto& meta : metadata) {
    total += meta.parameters.size();
    auto result = test::run_command(test::python() + " " + test::source_dir() +
                                    "/tests/python/check_state_dict_keys.py " +
                                    (dir / meta.stage_file).string() + " " + model->path());
    INFO(result.out << result.err);
    CHECK(result.exit_code == 0);
    const bool holds_conv1 = std::find(meta.parameters.begin(), meta.parameters.end(),
                                       "conv1.weight") != meta.parameters.end();
    CHECK(holds_conv1 == (meta.position == 0));
  }
  CHECK(total == 122);  // resnet18's state dict, each name held once
}

TEST_CASE("a tied weight split across stages is marked shared and tied", "[graph]") {
  auto model = graph::ModelGraph::load(test::models_dir() + "/tied.pt");
  const auto allowed = allowed_boundaries(*model);
  REQUIRE(allowed.size() >= 1);
  test::TempDir dir;
  auto metadata = graph::write_cluster_stages(
      *model, test::cluster_with_cuts({allowed[allowed.size() / 2]}, model->units().size()), test::loopback_nodes(2),
      dir.path().string());
  bool seen_tied = false;
  for (const auto& meta : metadata) {
    for (const auto& [name, canonical] : meta.tied_parameters) {
      seen_tied = true;
      CHECK(canonical == "embedding.weight");
      CHECK(meta.shared_parameters.count(name) == 1);
    }
  }
  CHECK(seen_tied);
}

namespace {

// x -> (x * a,) | h -> h * gain * b, where the second stage first bumps its buffer `gain` in
// place. Whole-model training is fine (each micro-batch's backward comes before the next
// forward); in GPipe order micro-batch 1's forward overwrites the `gain` that micro-batch 0's
// backward still needs. Written by hand, model and stages, so that no cut rule can refuse it.
torch::jit::Module scripted(const std::string& name, const std::vector<std::string>& parameters,
                            bool gain, const std::string& source) {
  torch::jit::Module module("__torch__." + name);
  for (const auto& p : parameters) {
    module.register_parameter(p, torch::linspace(0.5, 2.0, 4).requires_grad_(true), false);
  }
  if (gain) module.register_buffer("gain", torch::ones({4}));
  module.define(source);
  return module;
}

config::NodeMetadata hand_node(int id, const std::string& value, bool leaf) {
  config::NodeMetadata node;
  node.node_id = id;
  node.name = "node_" + std::to_string(id);
  node.stage_file = "stage" + std::to_string(id) + ".pt";
  config::StageInput input;
  input.value = value;
  input.type = "Tensor";
  if (id == 0) {
    input.model_input = 0;
  } else {
    input.from_node = id - 1;
    input.from_output = 0;
  }
  node.inputs.push_back(input);
  if (leaf) {
    node.returns_model_output = true;
  } else {
    node.outputs.push_back({"h", "Tensor", {id + 1}});
  }
  return node;
}

}  // namespace

TEST_CASE("a stage overwriting what an earlier micro-batch needs fails the micro-batch check",
          "[graph][chain]") {
  test::TempDir dir;
  const std::string model_path = (dir / "model.pt").string();
  scripted("Model", {"a", "b"}, true, R"(
def forward(self, x):
    h = x * self.a
    self.gain.add_(1.0)
    return h * self.gain * self.b
)").save(model_path);
  scripted("Stage0", {"a"}, false, R"(
def forward(self, x):
    return (x * self.a,)
)").save((dir / "stage0.pt").string());
  scripted("Stage1", {"b"}, true, R"(
def forward(self, h):
    self.gain.add_(1.0)
    return h * self.gain * self.b
)").save((dir / "stage1.pt").string());
  const std::vector<config::NodeMetadata> nodes = {hand_node(0, "x", false),
                                                   hand_node(1, "h", true)};
  const std::vector<at::Tensor> inputs = {torch::randn({4, 4})};

  auto chain = graph::StageChain::load(dir.path().string(), nodes);
  auto whole = graph::compare_with_model(model_path, chain, inputs, 7);
  INFO("whole batch: " << whole.worst);
  CHECK(whole.max() == 0);  // one micro-batch cannot see it

  auto fresh = graph::StageChain::load(dir.path().string(), nodes);
  auto micro = graph::compare_with_model(model_path, fresh, inputs, 7, 2);
  INFO("over micro-batches: " << micro.failure);
  CHECK(std::isinf(micro.max()));
  CHECK(micro.failure.find("the chain's backward of micro-batch 0 fails") != std::string::npos);
  CHECK(micro.failure.find("inplace") != std::string::npos);
}
