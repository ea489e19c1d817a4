// Fuse: test models cut into stages, the stage files "trained" (every parameter and buffer + 1,
// each distinct tensor once per stage), fused back, and checked with Python: a strict
// load_state_dict into the original model, the fused model's state_dict equal to the state dict
// file, tied weights one tensor, and the values the trained ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_set>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/graph/fuse.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_writer.h"
#include "tests/support/plans.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {



std::string model_file(const std::string& name) { return test::models_dir() + "/" + name + ".pt"; }

// Cuts `name` into `stages` stages at evenly spaced allowed cuts, writes the plan into `dir`.
std::vector<config::NodeMetadata> cut(const std::string& name, size_t stages,
                                      const fs::path& dir) {
  auto model = graph::ModelGraph::load(model_file(name));
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model->cut_allowed().size(); ++i) {
    if (model->cut_allowed(i)) allowed.push_back(i);
  }
  REQUIRE(allowed.size() + 1 >= stages);
  std::vector<size_t> cuts;
  for (size_t k = 1; k < stages; ++k) cuts.push_back(allowed[k * allowed.size() / stages]);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  REQUIRE(cuts.size() + 1 == stages);
  auto metadata =
      graph::write_cluster_stages(*model, test::cluster_with_cuts(cuts, model->units().size()),
                                  test::loopback_nodes(static_cast<int>(stages)), dir.string());
  graph::write_node_files(metadata, dir.string());
  return metadata;
}

// "Training": every distinct parameter and buffer tensor of the stage file gets `delta` added
// (integers: 1), then the file is saved again.
void train_stage(const fs::path& path, double delta = 1.0,
                 const std::vector<std::string>& only = {}) {
  torch::jit::Module module = torch::jit::load(path.string());
  std::unordered_set<const c10::TensorImpl*> seen;
  c10::NoGradGuard no_grad;
  auto touch = [&](const std::string& name, at::Tensor t) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) return;
    if (!seen.insert(t.unsafeGetTensorImpl()).second) return;
    if (t.is_floating_point()) {
      t.add_(delta);
    } else {
      t.add_(1);
    }
  };
  for (const auto& p : module.named_parameters()) touch(p.name, p.value);
  for (const auto& b : module.named_buffers()) touch(b.name, b.value);
  module.save(path.string());
}

std::vector<graph::StageFile> stage_files(const std::vector<config::NodeMetadata>& metadata,
                                            const fs::path& dir) {
  std::vector<graph::StageFile> out;
  for (const auto& meta : metadata) out.push_back({meta, (dir / meta.stage_file).string(), ""});
  return out;
}

test::CommandResult python(const std::string& script, const std::string& args) {
  return test::run_command(test::python() + " " + test::source_dir() + "/tests/python/" + script +
                           " " + args);
}

// Both Python checks on a fused output directory.
void check_with_python(const std::string& model, const fs::path& out, const std::string& delta) {
  const std::string sd = (out / "trained_state_dict.pt").string();
  const std::string fused = (out / "model.pt").string();
  auto strict = python("load_fused.py", sd + " " + model_file(model));
  INFO("load_fused.py: " << strict.out << strict.err);
  CHECK(strict.exit_code == 0);
  auto compare = python("check_fused_model.py",
                        sd + " " + fused + " " + model_file(model) + " --delta " + delta);
  INFO("check_fused_model.py: " << compare.out << compare.err);
  CHECK(compare.exit_code == 0);
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string fuse_error(const std::string& model, const std::vector<graph::StageFile>& stages,
                       const fs::path& out) {
  try {
    graph::fuse_stages(model_file(model), stages, out.string());
  } catch (const graph::FuseError& e) {
    return e.what();
  }
  return "(no error)";
}

const std::vector<std::string> kOutputFiles = {"model.pt", "trained_state_dict.pt"};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("fuse: small_cnn in 1, 2 and 3 stages", "[fuse][python]") {
  for (size_t stages = 1; stages <= 3; ++stages) {
    INFO(stages << " stage(s)");
    test::TempDir dir;
    auto metadata = cut("small_cnn", stages, dir.path());
    for (const auto& meta : metadata) train_stage(dir / meta.stage_file);
    // The plan directory's own files, as the CLI would find them.
    auto files = graph::cluster_stage_files(dir.path().string(), 0);
    REQUIRE(files.size() == stages);
    CHECK(files.front().metadata.position == 0);
    const fs::path out = dir / "trained";
    auto result = graph::fuse_stages(model_file("small_cnn"), files, out.string());
    CHECK(result.state_dict_path == (out / "trained_state_dict.pt").string());
    CHECK(result.model_path == (out / "model.pt").string());
    CHECK(result.shared_names == 0);
    CHECK(result.max_shared_difference == 0);
    CHECK(files_in(out) == kOutputFiles);
    check_with_python("small_cnn", out, "1");
    if (stages == 1) {  // the checker does notice values that were not trained
      auto untrained = python("check_fused_model.py",
                              (out / "trained_state_dict.pt").string() + " " +
                                  (out / "model.pt").string() + " " + model_file("small_cnn") +
                                  " --delta 0");
      CHECK(untrained.exit_code == 1);
      CHECK(contains(untrained.out, "FAIL: conv1.weight: not the original plus 0"));
    }
  }
}

TEST_CASE("fuse: resnet18 in 3 stages, with BatchNorm buffers, from bytes", "[fuse][python]") {
  test::TempDir dir;
  auto metadata = cut("resnet18", 3, dir.path());
  for (const auto& meta : metadata) train_stage(dir / meta.stage_file);
  auto files = stage_files(metadata, dir.path());
  for (auto& file : files) {  // as received over the network: bytes, no path
    file.bytes = test::read_text(file.path);
    file.path.clear();
  }
  const fs::path out = dir / "trained";
  auto result = graph::fuse_stages(model_file("resnet18"), files, out.string());
  CHECK(result.tensors == 122);
  CHECK(result.elements > 11000000);
  check_with_python("resnet18", out, "1");

  // A second fuse into the same directory replaces the files, atomically.
  train_stage(dir / metadata[1].stage_file);
  auto again = graph::fuse_stages(model_file("resnet18"), stage_files(metadata, dir.path()),
                                    out.string());
  CHECK(again.tensors == 122);
  CHECK(files_in(out) == kOutputFiles);
}

TEST_CASE("fuse: tied weights split across stages stay one tensor", "[fuse][python]") {
  test::TempDir dir;
  auto metadata = cut("tied", 2, dir.path());
  bool tied_across = false;
  for (const auto& meta : metadata) {
    for (const auto& [name, canonical] : meta.tied_parameters) {
      tied_across = tied_across || meta.shared_parameters.count(name) == 1;
    }
  }
  REQUIRE(tied_across);
  for (const auto& meta : metadata) train_stage(dir / meta.stage_file);
  const fs::path out = dir / "trained";
  auto result =
      graph::fuse_stages(model_file("tied"), stage_files(metadata, dir.path()), out.string());
  CHECK(result.max_shared_difference == 0);
  check_with_python("tied", out, "1");

  torch::jit::Module fused = torch::jit::load((out / "model.pt").string());
  at::Tensor decoder = fused.attr("decoder").toModule().attr("weight").toTensor();
  at::Tensor embedding = fused.attr("embedding").toModule().attr("weight").toTensor();
  CHECK(decoder.unsafeGetTensorImpl() == embedding.unsafeGetTensorImpl());

  // The same, with the two copies different within the tolerance: accepted, first copy taken.
  train_stage(dir / metadata[1].stage_file, 5e-7);
  auto close = graph::fuse_stages(model_file("tied"), stage_files(metadata, dir.path()),
                                    (dir / "close").string());
  CHECK(close.max_shared_difference > 1e-7);
  CHECK(close.max_shared_difference < 1e-6);
}

TEST_CASE("fuse: a module used by two stages", "[fuse][python]") {
  test::TempDir dir;
  auto metadata = cut("reused", 3, dir.path());
  REQUIRE(metadata.front().shared_parameters.count("shared.weight") == 1);
  for (const auto& meta : metadata) train_stage(dir / meta.stage_file);
  const fs::path out = dir / "trained";
  auto result =
      graph::fuse_stages(model_file("reused"), stage_files(metadata, dir.path()), out.string());
  CHECK(result.shared_names == 2);  // shared.weight, shared.bias
  check_with_python("reused", out, "1");
}

TEST_CASE("stages: an LSTM's parameters live in the stage that runs it, aliased by its list",
          "[fuse][python]") {
  // nn.LSTM computes from `_flat_weights`, a list of its parameters: the stage that reads the
  // list must hold the parameters themselves, the same tensors, or nothing would train them.
  test::TempDir dir;
  auto metadata = cut("lstm", 3, dir.path());
  int running = 0;
  for (const auto& meta : metadata) {
    torch::jit::Module stage = torch::jit::load((dir / meta.stage_file).string());
    bool runs_lstm = false;
    for (const auto* node : stage.get_method("forward").graph()->nodes()) {
      if (node->kind() == c10::Symbol::aten("lstm")) runs_lstm = true;
    }
    std::map<std::string, at::Tensor> parameters;
    for (const auto& p : stage.named_parameters()) parameters.emplace(p.name, p.value);
    INFO(meta.stage_file);
    if (!runs_lstm) {
      CHECK(parameters.count("lstm.weight_ih_l0") == 0);
      continue;
    }
    ++running;
    REQUIRE(parameters.count("lstm.weight_ih_l0") == 1);
    REQUIRE(parameters.count("lstm.bias_hh_l1") == 1);
    const auto flat = stage.attr("lstm").toObject()->getAttr("_flat_weights").toList();
    REQUIRE(flat.size() == 8);
    CHECK(flat.get(0).toTensor().unsafeGetTensorImpl() ==
          parameters.at("lstm.weight_ih_l0").unsafeGetTensorImpl());
    CHECK(flat.get(7).toTensor().unsafeGetTensorImpl() ==
          parameters.at("lstm.bias_hh_l1").unsafeGetTensorImpl());
  }
  CHECK(running == 1);
  for (const auto& meta : metadata) train_stage(dir / meta.stage_file);
  const fs::path out = dir / "trained";
  graph::fuse_stages(model_file("lstm"), stage_files(metadata, dir.path()), out.string());
  check_with_python("lstm", out, "1");
}

TEST_CASE("graph: no cut falls inside a with torch.no_grad() block", "[graph]") {
  auto model = graph::ModelGraph::load(model_file("frozen_parts"));
  const auto& units = model->units();
  int open = 0, allowed = 0, inside = 0;
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    if (units[i]->kind() == c10::prim::Enter) ++open;
    if (units[i]->kind() == c10::prim::Exit) --open;
    if (open > 0) ++inside;
    if (model->cut_allowed(i)) {
      ++allowed;
      CHECK(open == 0);
    }
  }
  CHECK(inside > 0);   // the block has units a cut could fall between
  CHECK(allowed >= 3);  // and the rest of the model can still be cut
}

TEST_CASE("fuse: errors name what is wrong and write nothing", "[fuse]") {
  test::TempDir dir;
  const fs::path out = dir / "trained";

  SECTION("a missing stage") {
    auto metadata = cut("small_cnn", 3, dir.path());
    auto files = stage_files(metadata, dir.path());
    files.erase(files.begin() + 1);
    const auto message = fuse_error("small_cnn", files, out);
    INFO(message);
    CHECK(contains(message, "name(s) on no stage (" + metadata[1].parameters.front()));
    CHECK(contains(message, "are these all the stages"));
  }
  SECTION("a stage given twice") {
    auto metadata = cut("small_cnn", 2, dir.path());
    auto files = stage_files(metadata, dir.path());
    files.push_back(files.back());
    CHECK(fuse_error("small_cnn", files, out) == "fuse: node_1 is given twice");
  }
  SECTION("a shared parameter that diverged") {
    auto metadata = cut("reused", 3, dir.path());
    train_stage(dir / metadata[2].stage_file, 0.01);  // the leaf's copy only
    const auto message = fuse_error("reused", stage_files(metadata, dir.path()), out);
    INFO(message);
    CHECK(contains(message, "fuse: shared parameter shared.weight differs between node_0 and "
                            "node_2 (largest difference 0.01"));
  }
  SECTION("tied weights that diverged") {
    auto metadata = cut("tied", 2, dir.path());
    train_stage(dir / metadata[1].stage_file);
    const auto message = fuse_error("tied", stage_files(metadata, dir.path()), out);
    INFO(message);
    CHECK(contains(message, "fuse: tied parameter decoder.weight (node_1) differs from "
                            "embedding.weight (node_0), largest difference 1"));
  }
  SECTION("a name the model does not have") {
    auto metadata = cut("small_cnn", 2, dir.path());
    const fs::path leaf = dir / metadata[1].stage_file;
    torch::jit::Module module = torch::jit::load(leaf.string());
    module.register_parameter("extra", at::zeros({3}), false);
    module.save(leaf.string());
    auto files = stage_files(metadata, dir.path());
    // Not in its metadata: refused as such.
    CHECK(contains(fuse_error("small_cnn", files, out),
                   "holds 1 name(s) its metadata does not list: extra"));
    files[1].metadata.parameters.push_back("extra");
    CHECK(fuse_error("small_cnn", files, out) ==
          "fuse: the stages do not match " + model_file("small_cnn") +
              "'s state dict: 1 name(s) the model does not have (extra); are these all the "
              "stages of one cluster of this model's plan?");
  }
  SECTION("metadata listing a name its stage lacks") {
    auto metadata = cut("small_cnn", 2, dir.path());
    auto files = stage_files(metadata, dir.path());
    files[0].metadata.parameters.push_back(files[1].metadata.parameters.front());
    CHECK(contains(fuse_error("small_cnn", files, out),
                   "lacks 1 name(s) its metadata lists: " + files[1].metadata.parameters.front()));
  }
  SECTION("stages of another model: names listed, up to 5") {
    auto metadata = cut("small_cnn", 1, dir.path());
    const auto message = fuse_error("resnet18", stage_files(metadata, dir.path()), out);
    INFO(message);
    // small_cnn's names partly match resnet18's (conv1, bn1, fc).
    CHECK(contains(message, "116 name(s) on no stage (layer1.0.conv1.weight, "
                            "layer1.0.bn1.weight, layer1.0.bn1.bias, layer1.0.bn1.running_mean, "
                            "layer1.0.bn1.running_var, ... (111 more)); 12 name(s) the model "
                            "does not have ("));
  }
  SECTION("a stage that is not TorchScript, and no stages") {
    auto metadata = cut("small_cnn", 1, dir.path());
    auto files = stage_files(metadata, dir.path());
    files[0].bytes = "not a zip file";
    CHECK(contains(fuse_error("small_cnn", files, out), "node_0 (stage bytes): cannot load"));
    CHECK(fuse_error("small_cnn", {}, out) == "fuse: no stage given");
    CHECK_THROWS_AS(graph::cluster_stage_files(dir.path().string(), 7), graph::FuseError);
  }
  CHECK(files_in(out).empty());
}
