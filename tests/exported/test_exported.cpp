// libs/exported against eager PyTorch: each model of export_pt2_zoo.py's zoo, exported by torch
// 2.x with a dynamic batch, is loaded from its .pt2 and run forward and backward on a batch other
// than the export's example (train mode, dropout seeded as eager's), then forward in eval mode;
// outputs, every parameter's gradient and the buffers after the forward equal, bit for bit, what
// one eager process computed on one thread. Then archives broken by hand, each refused in one line;
// clone(), to_archive(), SymInt inputs and outputs (the zoo's sym_int.pt2) and forward_observed.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include "libs/base/config_error.h"
#include "libs/exported/exported_module.h"
#include "libs/exported/pt2_archive.h"
#include "tests/exported/zoo_reference.h"
#include "tests/support/test_env.h"

// LibTorch's logging defines a CHECK of its own (c10/util/logging_is_not_google_glog.h), which
// aborts; Catch2's is the one meant here.
#undef CHECK
#include <catch2/catch.hpp>

using namespace ravnest;
using exported::ExportedModule;

namespace {

using test::zoo;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void check_against_eager(const std::string& name, ExportedModule& module) {
  const test::ZooReference ref = test::zoo_reference(name);
  REQUIRE(module.input_names().size() == ref.inputs.size());
  REQUIRE(module.output_count() == ref.outputs.size());
  test::check_against_eager(name, test::under_test(module));
}

void check_against_eager(const std::string& name) {
  ExportedModule module = ExportedModule::load(zoo(name + ".pt2"));
  check_against_eager(name, module);
}

// `source` rewritten to `target` with `edit` applied to its records (names without the archive's
// root folder); the records PyTorchStreamWriter writes itself are left to it.
void rewrite(const std::string& source, const std::string& target,
             const std::function<void(std::map<std::string, std::string>&)>& edit) {
  std::map<std::string, std::string> records;
  {
    caffe2::serialize::PyTorchStreamReader reader(source);
    for (const std::string& name : reader.getAllRecords()) {
      if (name == ".data/version" || name == ".data/serialization_id" || name == "byteorder" ||
          name == "version") {
        continue;
      }
      auto [data, size] = reader.getRecord(name);
      records[name] = std::string(static_cast<const char*>(data.get()), size);
    }
  }
  edit(records);
  caffe2::serialize::PyTorchStreamWriter writer(target);
  for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

std::string refusal(const std::string& path) {
  try {
    ExportedModule::load(path);
  } catch (const base::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.rfind(path, 0) == 0);
    return what;
  }
  FAIL("accepted " << path);
  return "";
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("exported: a CNN with BatchNorm and in-place ReLUs trains and evaluates as eager") {
  check_against_eager("cnn");
}

TEST_CASE("exported: a transformer encoder layer (SDPA) with a dynamic batch") {
  check_against_eager("encoder");
}

TEST_CASE("exported: an LSTM (a multi-output op, sym_size for its initial state)") {
  check_against_eager("lstm");
}

TEST_CASE("exported: several inputs and outputs, one of them integers") {
  check_against_eager("multi_io");
}

TEST_CASE("exported: a buffer mutated in place by the forward") {
  check_against_eager("mutated_buffer");
}

TEST_CASE("exported: dropout draws what eager draws under the same seed") {
  check_against_eager("dropout");
}

TEST_CASE("exported: tied embedding and output weights are one parameter") {
  check_against_eager("tied");
  ExportedModule module = ExportedModule::load(zoo("tied.pt2"));
  std::vector<std::string> names;
  for (const auto& [n, p] : module.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"emb.weight", "mix.weight", "mix.bias"});
}

TEST_CASE("exported: a non-persistent buffer and a tensor constant (data/constants/)") {
  check_against_eager("constants");
}

TEST_CASE("exported: a GPT-2-shaped block (arange with keyword arguments, causal SDPA with dropout)") {
  check_against_eager("gpt");
}

TEST_CASE("exported: torchvision's resnet18") {
  check_against_eager("resnet18");
}

TEST_CASE("exported: parameters and buffers keep their original names; to() keeps leaves") {
  ExportedModule module = ExportedModule::load(zoo("cnn.pt2"));
  std::vector<std::string> buffers;
  for (const auto& [n, b] : module.named_buffers()) buffers.push_back(n);
  CHECK(buffers == std::vector<std::string>{"bn1.running_mean", "bn1.running_var",
                                            "bn1.num_batches_tracked", "bn2.running_mean",
                                            "bn2.running_var", "bn2.num_batches_tracked"});
  CHECK(module.named_parameters().front().first == "conv1.weight");
  CHECK(module.has_training_behaviour());
  CHECK(module.input_names() == std::vector<std::string>{"x"});
  module.to(c10::Device("cpu"));
  for (const auto& [n, p] : module.named_parameters()) CHECK(p.is_leaf());
  CHECK_THROWS_WITH(module.forward({}), Catch::Contains("forward takes 1 inputs (x), got 0"));
}

TEST_CASE("exported: a truncated file and a file that is no zip are refused in one line") {
  test::TempDir dir;
  const std::string good = read_file(zoo("cnn.pt2"));
  const auto truncated = (dir / "truncated.pt2").string();
  test::write_text(truncated, good.substr(0, good.size() / 2));
  CHECK(refusal(truncated).find("not a readable .pt2 (zip) archive") != std::string::npos);
  const auto text = (dir / "text.pt2").string();
  test::write_text(text, "hello");
  CHECK(refusal(text).find("not a readable .pt2 (zip) archive") != std::string::npos);
  const auto missing = (dir / "missing.pt2").string();
  CHECK(refusal(missing).find("not a readable .pt2 (zip) archive") != std::string::npos);
}

TEST_CASE("exported: archives broken by hand are refused in one line naming what") {
  test::TempDir dir;
  const std::string cnn = zoo("cnn.pt2");
  auto broken = [&](const std::string& name,
                    const std::function<void(std::map<std::string, std::string>&)>& edit) {
    const std::string path = (dir / (name + ".pt2")).string();
    rewrite(cnn, path, edit);
    return refusal(path);
  };
  // The same records rewritten load: the edits below are what is refused.
  const std::string same = (dir / "same.pt2").string();
  rewrite(cnn, same, [](auto&) {});
  CHECK_NOTHROW(ExportedModule::load(same));

  SECTION("a weight file of the wrong size") {
    const std::string what = broken("short_weight", [](auto& records) {
      std::string& w = records.at("data/weights/weight_0");
      w.resize(w.size() - 4);
    });
    CHECK(what.find("data/weights/weight_0") != std::string::npos);
    CHECK(what.find("bytes") != std::string::npos);
  }
  SECTION("a weight of absurd sizes") {
    const std::string what = broken("huge_weight", [](auto& records) {
      std::string& config = records.at("data/weights/model_weights_config.json");
      replace_once(config, R"("sizes": [{"as_int": 8})", R"("sizes": [{"as_int": 4611686018427387904})");
    });
    CHECK(what.find("beyond any tensor") != std::string::npos);
  }
  SECTION("a node naming an operator the dispatcher does not have") {
    const std::string what = broken("unknown_op", [](auto& records) {
      replace_once(records.at("models/model.json"), "torch.ops.aten.linear.default",
                   "torch.ops.aten.no_such_op.default");
    });
    CHECK(what.find("node 'linear' (torch.ops.aten.no_such_op.default): operator aten::no_such_op "
                    "is not registered") != std::string::npos);
  }
  SECTION("a custom op's namespace") {
    const std::string what = broken("custom_op", [](auto& records) {
      replace_once(records.at("models/model.json"), "torch.ops.aten.linear.default",
                   "torch.ops.mylib.fused_linear.default");
    });
    CHECK(what.find("mylib::fused_linear is not registered") != std::string::npos);
  }
  SECTION("an unknown argument name") {
    const std::string what = broken("unknown_argument", [](auto& records) {
      replace_once(records.at("models/model.json"), R"("name": "start_dim")", R"("name": "begin_dim")");
    });
    CHECK(what.find("node 'flatten'") != std::string::npos);
    CHECK(what.find("'begin_dim' is not one of aten::flatten's") != std::string::npos);
  }
  SECTION("a schema major newer than supported") {
    const std::string what = broken("new_schema", [](auto& records) {
      replace_once(records.at("models/model.json"), R"("schema_version": {"major": 8)",
                   R"("schema_version": {"major": 99)");
    });
    CHECK(what.find("(models/model.json): schema version 99.") != std::string::npos);
  }
  SECTION("a model.json that is not JSON") {
    const std::string what = broken("not_json", [](auto& records) {
      records.at("models/model.json") = "{\"graph_module\": [";
    });
    CHECK(what.find("models/model.json") != std::string::npos);
  }
  SECTION("no model at all") {
    const std::string what = broken("no_model", [](auto& records) { records.erase("models/model.json"); });
    CHECK(what.find("not a torch.export archive") != std::string::npos);
  }
  SECTION("a missing weight file") {
    const std::string what = broken("missing_weight", [](auto& records) {
      records.erase("data/weights/weight_3");
    });
    CHECK(what.find("no data/weights/weight_3") != std::string::npos);
  }
}

TEST_CASE("exported: clone() is an independent module with equal values, mode and device") {
  ExportedModule module = ExportedModule::load(zoo("cnn.pt2"));
  ExportedModule copy = module.clone();
  // The original trains a step (BatchNorm's statistics move, gradients fill): the copy does not see it.
  const test::ZooReference ref = test::zoo_reference("cnn");
  module.forward(ref.inputs)[0].toTensor().sum().backward();
  const auto original_parameters = module.named_parameters();
  const auto copied_parameters = copy.named_parameters();
  REQUIRE(copied_parameters.size() == original_parameters.size());
  for (size_t i = 0; i < copied_parameters.size(); ++i) {
    CHECK(copied_parameters[i].first == original_parameters[i].first);
    CHECK(copied_parameters[i].second.is_leaf());
    CHECK(copied_parameters[i].second.requires_grad());
    CHECK_FALSE(copied_parameters[i].second.grad().defined());
    CHECK_FALSE(copied_parameters[i].second.is_alias_of(original_parameters[i].second));
  }
  CHECK_FALSE(at::equal(copy.named_buffers()[0].second, module.named_buffers()[0].second));
  // And it still computes what eager did from the archive's state.
  check_against_eager("cnn", copy);

  module.train(false);
  CHECK_FALSE(module.clone().is_training());
  // Tied weights stay tied in the copy.
  ExportedModule tied = ExportedModule::load(zoo("tied.pt2")).clone();
  const exported::Pt2Archive archive = tied.to_archive();
  CHECK(archive.weights.at("emb.weight").is_alias_of(archive.weights.at("out.weight")));
}

TEST_CASE("exported: to_archive() gives the current weights under their names and the source text") {
  const exported::Pt2Archive source = exported::read_pt2_archive(zoo("mutated_buffer.pt2"));
  ExportedModule module = ExportedModule::load(zoo("mutated_buffer.pt2"));
  module.forward(test::zoo_reference("mutated_buffer").inputs);
  const exported::Pt2Archive archive = module.to_archive();
  CHECK(archive.model_name == source.model_name);
  CHECK(archive.model_json == source.model_json);
  CHECK(archive.program.nodes.size() == source.program.nodes.size());
  REQUIRE(archive.weights.size() == source.weights.size());
  CHECK(archive.constants.size() == source.constants.size());
  for (const auto& [name, buffer] : module.named_buffers()) {
    INFO(name);
    REQUIRE(archive.weights.count(name));
    CHECK(archive.weights.at(name).device().is_cpu());
    CHECK(at::equal(archive.weights.at(name), buffer));
    CHECK_FALSE(at::equal(archive.weights.at(name), source.weights.at(name)));  // the forward moved it
  }
  for (const auto& [name, parameter] : module.named_parameters()) {
    CHECK(archive.weights.at(name).requires_grad());
    CHECK(archive.weights.at(name).is_leaf());
  }
  // Loaded again it is the module as it was.
  ExportedModule again = ExportedModule::from_archive(archive);
  CHECK(at::equal(again.named_buffers()[0].second, module.named_buffers()[0].second));
}

TEST_CASE("exported: a SymInt input takes an int (or a one-integer tensor); a SymInt output is an int") {
  ExportedModule module = ExportedModule::load(zoo("sym_int.pt2"));
  CHECK(module.input_names() == std::vector<std::string>{"x", "b"});
  REQUIRE(module.output_count() == 2);
  const at::Tensor x = torch::randn({6, 6});
  const auto parameters = module.named_parameters();
  const at::Tensor expected = at::linear(x, parameters[0].second, parameters[1].second).reshape({6, 2, 2});
  std::vector<c10::IValue> out = module.forward({x, int64_t{6}});
  REQUIRE(out[1].isInt());
  CHECK(out[1].toInt() == 18);
  test::check_equal(out[0].toTensor(), expected, "the reshaped output");
  out = module.forward({x, torch::tensor(int64_t{6})});
  CHECK(out[1].toInt() == 18);
  CHECK_THROWS_WITH(module.forward({x, 6.0}),
                    Catch::Contains("input 'b' is a SymInt: an int or a one-element integer tensor"));
}

TEST_CASE("exported: forward_observed reports every node in order, with its time and outputs") {
  const exported::Pt2Archive archive = exported::read_pt2_archive(zoo("cnn.pt2"));
  ExportedModule module = ExportedModule::from_archive(archive);
  module.train(false);  // the two forwards below see the same buffers
  const std::vector<c10::IValue> inputs = test::zoo_reference("cnn").inputs;
  const at::Tensor plain = module.forward(inputs)[0].toTensor();
  std::vector<size_t> indices;
  std::vector<double> seconds;
  at::Tensor last_output;
  const std::vector<c10::IValue> observed = module.forward_observed(
      inputs, [&](size_t node, double s, const std::vector<c10::IValue>& outputs) {
        indices.push_back(node);
        seconds.push_back(s);
        REQUIRE(!outputs.empty());
        if (outputs[0].isTensor()) last_output = outputs[0].toTensor();
      });
  REQUIRE(indices.size() == archive.program.nodes.size());
  for (size_t i = 0; i < indices.size(); ++i) CHECK(indices[i] == i);
  for (double s : seconds) CHECK(s >= 0);
  test::check_equal(observed[0].toTensor(), plain, "the observed forward's output");
  test::check_equal(last_output, plain, "the last node's output");
  CHECK_THROWS_WITH(module.forward_observed(inputs, [](size_t, double, const auto&) {
                      throw std::runtime_error("observer stops");
                    }),
                    "observer stops");
}
