// libs/exported's cutting of a program into stages, without LibTorch: graphs written by hand (a
// skip connection, a tied parameter, in-place ops, batch_norm's running statistics, a symbolic
// batch size crossing as an int, a mutation written back as an output) and a real export of a
// small CNN (fixtures/cnn_model.json: export_pt2_zoo.py's "cnn" by torch 2.15, stack traces
// removed).
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "libs/base/config_error.h"
#include "libs/exported/exported_cut.h"
#include "libs/exported/exported_program.h"

using namespace ravnest::exported;
using ravnest::base::ConfigError;
using json = nlohmann::json;
using Strings = std::vector<std::string>;

namespace {

json tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json sym_int(const std::string& name) { return {{"as_sym_int", {{"as_name", name}}}}; }

json in(const std::string& arg, json value) { return {{"name", arg}, {"arg", std::move(value)}, {"kind", 1}}; }

json node(const std::string& name, const std::string& target, std::vector<json> inputs,
          std::vector<json> outputs, const std::string& module = "") {
  json metadata = json::object();
  if (!module.empty()) {
    metadata["nn_module_stack"] = "L__self__,,M;L__self__" + module + "," + module + ",torch.nn.modules.X";
  }
  return {{"name", name}, {"target", "torch.ops.aten." + target}, {"inputs", inputs},
          {"outputs", outputs}, {"metadata", metadata}};
}

json meta(json sizes) {
  return {{"dtype", 7}, {"sizes", std::move(sizes)}, {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}}, {"strides", json::array()},
          {"storage_offset", {{"as_int", 0}}}, {"layout", 7}};
}

// A program's JSON: state specs (kind, placeholder, target) then user inputs, nodes, outputs.
struct Whole {
  json input_specs = json::array();
  json inputs = json::array();
  json nodes = json::array();
  json outputs = json::array();
  json output_specs = json::array();
  json tensor_values = json::object();
  json sym_int_values = json::object();

  void state(const std::string& kind, const std::string& placeholder, const std::string& target) {
    inputs.push_back(tensor(placeholder));
    const std::string key = kind == "parameter" ? "parameter_name"
                            : kind == "buffer"  ? "buffer_name"
                                                : "tensor_constant_name";
    json spec = {{"arg", {{"name", placeholder}}}, {key, target}};
    if (kind == "buffer") spec["persistent"] = true;
    input_specs.push_back({{kind, spec}});
    tensor_values[placeholder] = meta(json::array({{{"as_int", 3}}}));
  }
  void user_input(const std::string& name, json dim0) {
    inputs.push_back(tensor(name));
    input_specs.push_back({{"user_input", {{"arg", tensor(name)}}}});
    tensor_values[name] = meta(json::array({std::move(dim0), {{"as_int", 3}}}));
  }
  void add(json n) {
    for (const json& out : n["outputs"]) {
      if (out.contains("as_tensor")) tensor_values[out["as_tensor"]["name"].get<std::string>()] = meta(json::array());
      if (out.contains("as_sym_int")) {
        sym_int_values[out["as_sym_int"]["as_name"].get<std::string>()] = {{"as_expr", {{"expr_str", "s0"}}}};
      }
    }
    nodes.push_back(std::move(n));
  }
  void output(const std::string& kind, const std::string& name, const std::string& target = "") {
    outputs.push_back(tensor(name));
    json spec = {{"arg", kind == "user_output" ? tensor(name) : json{{"name", name}}}};
    if (!target.empty()) spec["buffer_name"] = target;
    output_specs.push_back({{kind, spec}});
  }
  std::string text() const {
    const json call_graph = json::array(
        {{{"fqn", ""},
          {"signature",
           {{"inputs", json::array()}, {"outputs", json::array()}, {"in_spec", "WHOLE_IN"},
            {"out_spec", "WHOLE_OUT"}, {"forward_arg_names", {"x"}}}}},
         {{"fqn", "fc"}, {"signature", nullptr}}});
    const json root = {
        {"schema_version", {{"major", 8}, {"minor", 20}}},
        {"torch_version", "2.15.0"},
        {"range_constraints", {{"s0", {{"min_val", 2}, {"max_val", 4096}}}}},
        {"verifiers", {"TRAINING"}},
        {"graph_module",
         {{"graph",
           {{"inputs", inputs}, {"outputs", outputs}, {"nodes", nodes},
            {"tensor_values", tensor_values}, {"sym_int_values", sym_int_values},
            {"sym_bool_values", json::object()}, {"is_single_tensor_return", false}}},
          {"signature", {{"input_specs", input_specs}, {"output_specs", output_specs}}},
          {"module_call_graph", call_graph},
          {"metadata", json::object()}}}};
    return root.dump();
  }
};

// x -> linear(fc) -> relu_ -> [bn: add_ num_batches_tracked, batch_norm(training)] -> sym_size
// -> mul by running_mean -> linear(fc again: tied) -> view(s, -1) -> add the relu_'s output (a skip).
Whole skip_program() {
  Whole w;
  w.state("parameter", "p_w", "fc.weight");
  w.state("parameter", "p_unused", "emb.weight");
  w.state("buffer", "b_count", "bn.num_batches_tracked");
  w.state("buffer", "b_mean", "bn.running_mean");
  w.state("buffer", "b_var", "bn.running_var");
  w.state("tensor_constant", "c_k", "k");
  w.user_input("x", {{"as_expr", {{"expr_str", "s0"}, {"hint", {{"as_int", 4}}}}}});
  w.add(node("linear", "linear.default", {in("input", tensor("x")), in("weight", tensor("p_w"))},
             {tensor("h0")}, "fc"));
  w.add(node("relu_", "relu_.default", {in("self", tensor("h0"))}, {tensor("h1")}));
  w.add(node("add_", "add_.Tensor", {in("self", tensor("b_count")), in("other", {{"as_int", 1}})},
             {tensor("a2")}, "bn"));
  w.add(node("batch_norm", "batch_norm.default",
             {in("input", tensor("h1")), in("weight", {{"as_none", true}}), in("bias", {{"as_none", true}}),
              in("running_mean", tensor("b_mean")), in("running_var", tensor("b_var")),
              in("training", {{"as_bool", true}})},
             {tensor("bn3")}, "bn"));
  w.add(node("sym_size_int", "sym_size.int", {in("self", tensor("x")), in("dim", {{"as_int", 0}})},
             {sym_int("s4")}));
  w.add(node("mul", "mul.Tensor", {in("self", tensor("bn3")), in("other", tensor("b_mean"))},
             {tensor("m5")}));
  w.add(node("linear_1", "linear.default",
             {in("input", tensor("m5")), in("weight", tensor("p_w")), in("bias", tensor("c_k"))},
             {tensor("t6")}, "fc"));
  w.add(node("view", "view.default",
             {in("self", tensor("t6")),
              in("size", {{"as_sym_ints", {{{"as_name", "s4"}}, {{"as_int", -1}}}}})},
             {tensor("v7")}));
  w.add(node("add", "add.Tensor", {in("self", tensor("v7")), in("other", tensor("h1"))}, {tensor("out8")}));
  w.output("user_output", "out8");
  return w;
}

std::string fixture(const std::string& name) {
  std::ifstream file(std::string(RAVNEST_TEST_FIXTURES) + "/" + name);
  REQUIRE(file);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

Strings value_names(const ProgramUnits& units, const std::vector<size_t>& indices) {
  Strings out;
  for (size_t i : indices) out.push_back(units.values[i].name);
  return out;
}

Strings names_of(const std::vector<Argument>& args) {
  Strings out;
  for (const Argument& a : args) {
    for (const std::string& n : a.value_names()) out.push_back(n);
  }
  return out;
}

std::vector<int> input_kinds(const ExportedProgram& p) {
  std::vector<int> out;
  for (const InputSpec& s : p.input_specs) out.push_back(static_cast<int>(s.kind));
  return out;
}

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    return what;
  }
  FAIL("accepted");
  return "";
}

}  // namespace

TEST_CASE("units are the nodes, labelled by operator and innermost module, with their liveness") {
  const std::string text = skip_program().text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const ProgramUnits units = program_units(p);
  REQUIRE(units.size() == 9);
  CHECK(units.labels[0] == "aten::linear fc");
  CHECK(units.labels[1] == "aten::relu_");
  CHECK(units.labels[3] == "aten::batch_norm bn");
  REQUIRE(units.values.size() == 10);
  const ProgramValue& x = units.values[units.value_index.at("x")];
  CHECK(x.defined_at == -1);
  CHECK(x.last_used_at == 4);
  CHECK(x.kind == "Tensor");
  const ProgramValue& s4 = units.values[units.value_index.at("s4")];
  CHECK(s4.kind == "int");
  CHECK(s4.defined_at == 4);
  CHECK(s4.last_used_at == 7);
  CHECK(units.values[units.value_index.at("out8")].last_used_at == 9);
  CHECK(units.values[units.value_index.at("a2")].last_used_at == 2);  // nothing reads it
  CHECK(units.first_state[0] == Strings{"fc.weight"});
  CHECK(units.first_state[2] == Strings{"bn.num_batches_tracked"});
  CHECK(units.first_state[3] == Strings{"bn.running_mean", "bn.running_var"});
  CHECK(units.first_state[6] == Strings{"k"});  // fc.weight was read first by unit 0
  CHECK(units.mutated_state == Strings{"bn.num_batches_tracked", "bn.running_mean", "bn.running_var"});
  REQUIRE(units.crossing.size() == 8);
  CHECK(value_names(units, units.crossing[1]) == Strings{"x", "h1"});
  CHECK(value_names(units, units.crossing[5]) == Strings{"h1", "s4", "m5"});
  CHECK(value_names(units, units.crossing[7]) == Strings{"h1", "v7"});
}

TEST_CASE("cuts: not before an in-place write to a crossing value, not across a mutated buffer") {
  const ExportedProgram p = parse_exported_program(skip_program().text(), "m");
  const ProgramUnits units = program_units(p);
  // 0: relu_ writes linear's output; 3, 4: running_mean is written by batch_norm (3) and read by
  // mul (5); fc.weight read by 0 and 6 (tied) does not forbid.
  CHECK(units.cut_allowed == std::vector<bool>{false, true, true, false, false, true, true, true});

  // An in-place write to a view of a user input keeps everything up to it in the root.
  Whole w;
  w.user_input("x", {{"as_int", 4}});
  w.add(node("view", "view.default", {in("self", tensor("x")), in("size", {{"as_ints", {-1}}})}, {tensor("v")}));
  w.add(node("neg", "neg.default", {in("self", tensor("v"))}, {tensor("n")}));
  w.add(node("add_", "add_.Tensor", {in("self", tensor("v")), in("other", tensor("n"))}, {tensor("a")}));
  w.add(node("exp", "exp.default", {in("self", tensor("a"))}, {tensor("e")}));
  w.output("user_output", "e");
  const ProgramUnits view_units = program_units(parse_exported_program(w.text(), "m"));
  CHECK(view_units.cut_allowed == std::vector<bool>{false, false, true});

  // batch_norm in eval (training false) writes nothing.
  std::string eval = skip_program().text();
  eval.replace(eval.find(R"({"as_bool":true})"), 16, R"({"as_bool":false})");
  CHECK(program_units(parse_exported_program(eval, "m")).cut_allowed ==
        std::vector<bool>{false, true, true, true, true, true, true, true});
}

TEST_CASE("two and three stages: inputs arrive from their producer, a skip directly, state where read") {
  const std::string text = skip_program().text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const ProgramUnits units = program_units(p);

  const auto two = wire_program_stages(p, units, {{0, 2}, {2, 9}});
  REQUIRE(two.size() == 2);
  CHECK(two[0].inputs == Strings{"x"});
  CHECK(two[0].input_sources[0].model_input == 0);
  CHECK(two[0].outputs == Strings{"x", "h1"});
  CHECK(two[1].inputs == Strings{"x", "h1"});
  CHECK(two[1].is_leaf);
  CHECK(two[1].outputs.empty());

  const auto three = wire_program_stages(p, units, {{0, 2}, {2, 6}, {6, 9}});
  REQUIRE(three.size() == 3);
  CHECK(three[0].outputs == Strings{"x", "h1"});
  CHECK(three[0].output_consumers == std::vector<std::vector<int>>{{1}, {1, 2}});
  CHECK(three[1].inputs == Strings{"x", "h1"});
  CHECK(three[1].outputs == Strings{"s4", "m5"});
  CHECK(three[1].output_types == Strings{"int", "Tensor"});
  // The skip connection h1 comes straight from stage 0, not through stage 1.
  CHECK(three[2].inputs == Strings{"h1", "s4", "m5"});
  CHECK(three[2].input_types == Strings{"Tensor", "int", "Tensor"});
  CHECK(three[2].input_sources[0].stage == 0);
  CHECK(three[2].input_sources[0].output == 1);
  CHECK(three[2].input_sources[1].stage == 1);
  CHECK(three[2].input_sources[1].output == 0);
  CHECK(three[2].input_sources[2].output == 1);
  // fc.weight is tied across stages 0 and 2; emb.weight, read by nothing, goes to the root.
  CHECK(three[0].state == Strings{"fc.weight", "emb.weight"});
  CHECK(three[1].state == Strings{"bn.num_batches_tracked", "bn.running_mean", "bn.running_var"});
  CHECK(three[2].state == Strings{"fc.weight", "k"});

  CHECK_THROWS_AS(wire_program_stages(p, units, {{0, 1}, {1, 9}}), std::invalid_argument);  // before relu_
  CHECK_THROWS_AS(wire_program_stages(p, units, {{0, 2}, {3, 9}}), std::invalid_argument);
  CHECK_THROWS_AS(wire_program_stages(p, units, {{0, 2}, {2, 8}}), std::invalid_argument);
  CHECK_THROWS_AS(wire_program_stages(p, units, {}), std::invalid_argument);
}

TEST_CASE("a stage's model.json parses back with exactly its inputs, outputs and specs") {
  const std::string text = skip_program().text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const auto stages = wire_program_stages(p, program_units(p), {{0, 2}, {2, 6}, {6, 9}});
  using IK = InputSpec::Kind;
  const int param = static_cast<int>(IK::kParameter), buffer = static_cast<int>(IK::kBuffer),
            constant = static_cast<int>(IK::kTensorConstant), user = static_cast<int>(IK::kUserInput);

  const std::string root_text = stage_model_json(text, p, stages[0], "m");
  const ExportedProgram root = parse_exported_program(root_text, "stage 0");
  CHECK(root.nodes.size() == 2);
  CHECK(names_of(root.inputs) == Strings{"p_w", "p_unused", "x"});
  CHECK(input_kinds(root) == std::vector<int>{param, param, user});
  CHECK(names_of(root.outputs) == Strings{"x", "h1"});
  CHECK(root.output_specs[1].kind == OutputSpec::Kind::kUserOutput);
  const json root_json = json::parse(root_text);
  const json& root_sig = root_json["graph_module"]["module_call_graph"][0]["signature"];
  CHECK(root_sig["in_spec"] == "WHOLE_IN");  // the root takes the model's inputs as they were
  CHECK(json::parse(root_sig["out_spec"].get<std::string>())[1]["children_spec"].size() == 2);
  CHECK(root_json["graph_module"]["module_call_graph"].size() == 2);
  CHECK(root_json["range_constraints"].contains("s0"));

  const ExportedProgram middle = parse_exported_program(stage_model_json(text, p, stages[1], "m"), "stage 1");
  CHECK(names_of(middle.inputs) == Strings{"b_count", "b_mean", "b_var", "x", "h1"});
  CHECK(input_kinds(middle) == std::vector<int>{buffer, buffer, buffer, user, user});
  REQUIRE(middle.outputs.size() == 2);
  CHECK(middle.outputs[0].kind == Argument::Kind::kSymInt);
  CHECK(names_of(middle.outputs) == Strings{"s4", "m5"});

  const std::string leaf_text = stage_model_json(text, p, stages[2], "m");
  const ExportedProgram leaf = parse_exported_program(leaf_text, "stage 2");
  CHECK(leaf.nodes.size() == 3);
  CHECK(names_of(leaf.inputs) == Strings{"p_w", "c_k", "h1", "s4", "m5"});
  CHECK(input_kinds(leaf) == std::vector<int>{param, constant, user, user, user});
  CHECK(leaf.inputs[3].kind == Argument::Kind::kSymInt);
  CHECK(leaf.input_specs[0].target == "fc.weight");
  CHECK(names_of(leaf.outputs) == Strings{"out8"});
  const json leaf_json = json::parse(leaf_text);
  const json& graph = leaf_json["graph_module"]["graph"];
  CHECK(graph["tensor_values"].contains("h1"));
  CHECK(graph["tensor_values"].contains("p_w"));
  CHECK_FALSE(graph["tensor_values"].contains("x"));
  CHECK_FALSE(graph["tensor_values"].contains("h0"));
  CHECK(graph["sym_int_values"].contains("s4"));
  const json& leaf_sig = leaf_json["graph_module"]["module_call_graph"][0]["signature"];
  CHECK(leaf_sig["out_spec"] == "WHOLE_OUT");
  CHECK(leaf_sig["forward_arg_names"] == json(Strings{"h1", "s4", "m5"}));
  const json in_spec = json::parse(leaf_sig["in_spec"].get<std::string>());
  CHECK(in_spec[0] == 1);
  CHECK(in_spec[1]["children_spec"][0]["children_spec"].size() == 3);
  CHECK(leaf_json["verifiers"] == json({"TRAINING"}));
  CHECK(leaf_json["range_constraints"].contains("s0"));  // s4's expression
}

TEST_CASE("one stage is the whole program") {
  const std::string text = skip_program().text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const auto one = wire_program_stages(p, program_units(p), {{0, 9}});
  REQUIRE(one.size() == 1);
  CHECK(one[0].is_leaf);
  CHECK(one[0].inputs == Strings{"x"});
  CHECK(one[0].outputs.empty());
  CHECK(one[0].state == Strings{"fc.weight", "emb.weight", "bn.num_batches_tracked", "bn.running_mean",
                                "bn.running_var", "k"});
  const std::string stage_text = stage_model_json(text, p, one[0], "m");
  CHECK(json::parse(stage_text) == json::parse(text));
}

TEST_CASE("a mutation written back as an output stays with the stage whose node writes it") {
  Whole w;
  w.state("buffer", "b_ema", "ema");
  w.user_input("x", {{"as_int", 8}});
  w.add(node("mean", "mean.dim", {in("self", tensor("x")), in("dim", {{"as_ints", {0}}})}, {tensor("m")}));
  w.add(node("add", "add.Tensor", {in("self", tensor("b_ema")), in("other", tensor("m"))}, {tensor("e")}));
  w.add(node("mul", "mul.Tensor", {in("self", tensor("x")), in("other", tensor("e"))}, {tensor("y")}));
  w.add(node("sub", "sub.Tensor", {in("self", tensor("y")), in("other", tensor("b_ema"))}, {tensor("z")}));
  w.output("buffer_mutation", "e", "ema");
  w.output("user_output", "z");
  const std::string text = w.text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const ProgramUnits units = program_units(p);
  CHECK(units.cut_allowed == std::vector<bool>{true, false, false});
  CHECK(units.mutated_state == Strings{"ema"});
  CHECK(units.values[units.value_index.at("e")].last_used_at == 2);

  const auto stages = wire_program_stages(p, units, {{0, 1}, {1, 4}});
  CHECK(stages[0].outputs == Strings{"x", "m"});
  CHECK(stages[0].state.empty());
  CHECK(stages[1].state == Strings{"ema"});
  const std::string first_text = stage_model_json(text, p, stages[0], "m");
  // x's batch is static here: no value names the whole's symbol s0, so its range is left out.
  CHECK(json::parse(first_text)["range_constraints"] == json::object());
  const ExportedProgram first = parse_exported_program(first_text, "s0");
  CHECK(names_of(first.outputs) == Strings{"x", "m"});
  for (const OutputSpec& spec : first.output_specs) CHECK(spec.kind == OutputSpec::Kind::kUserOutput);
  const ExportedProgram second = parse_exported_program(stage_model_json(text, p, stages[1], "m"), "s1");
  CHECK(names_of(second.inputs) == Strings{"b_ema", "x", "m"});
  REQUIRE(second.output_specs.size() == 2);
  CHECK(second.output_specs[0].kind == OutputSpec::Kind::kBufferMutation);
  CHECK(second.output_specs[0].target == "ema");
  CHECK(names_of(second.outputs) == Strings{"e", "z"});
}

TEST_CASE("user inputs' batch dimension: symbolic with the example's size, or static") {
  const std::string dynamic = skip_program().text();
  const auto batches = user_input_batches(dynamic, parse_exported_program(dynamic, "m"), "m");
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].name == "x");
  CHECK(batches[0].dynamic);
  CHECK(batches[0].size == 4);

  Whole w;
  w.user_input("x", {{"as_int", 64}});
  w.add(node("neg", "neg.default", {in("self", tensor("x"))}, {tensor("n")}));
  w.output("user_output", "n");
  const std::string fixed = w.text();
  const auto static_batches = user_input_batches(fixed, parse_exported_program(fixed, "m"), "m");
  REQUIRE(static_batches.size() == 1);
  CHECK_FALSE(static_batches[0].dynamic);
  CHECK(static_batches[0].size == 64);
}

TEST_CASE("a real export: the CNN's in-place ReLUs and BatchNorms, cut, and read back") {
  const std::string text = fixture("cnn_model.json");
  const ExportedProgram p = parse_exported_program(text, "cnn.pt2 (models/model.json)");
  const ProgramUnits units = program_units(p);
  REQUIRE(units.size() == 12);
  CHECK(units.labels == Strings{"aten::conv2d conv1", "aten::add_ bn1", "aten::batch_norm bn1",
                                "aten::relu_ act", "aten::max_pool2d", "aten::conv2d conv2",
                                "aten::add_ bn2", "aten::batch_norm bn2", "aten::relu_",
                                "aten::max_pool2d", "aten::flatten", "aten::linear fc"});
  // relu_ writes batch_norm's output: no cut between them (boundaries 2 and 7).
  CHECK(units.cut_allowed ==
        std::vector<bool>{true, true, false, true, true, true, true, false, true, true, true});
  CHECK(units.mutated_state == Strings{"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                                       "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked"});
  const auto batches = user_input_batches(text, p, "cnn");
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].dynamic);
  CHECK(batches[0].size == 4);

  const auto stages = wire_program_stages(p, units, {{0, 4}, {4, 9}, {9, 12}});
  CHECK(stages[0].state == Strings{"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias",
                                   "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"});
  CHECK(stages[1].inputs == Strings{"relu_"});
  CHECK(stages[2].inputs == Strings{"relu__1"});
  CHECK(stages[2].state == Strings{"fc.weight", "fc.bias"});
  size_t nodes = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const ExportedProgram stage = parse_exported_program(stage_model_json(text, p, stages[s], "cnn"), "s");
    nodes += stage.nodes.size();
    CHECK(stage.input_specs.size() == stages[s].state.size() + stages[s].inputs.size());
  }
  CHECK(nodes == p.nodes.size());
}

TEST_CASE("a whole JSON that is not the program's is refused in one line") {
  const std::string text = skip_program().text();
  const ExportedProgram p = parse_exported_program(text, "m");
  const auto stages = wire_program_stages(p, program_units(p), {{0, 2}, {2, 9}});
  const std::vector<std::string> bad = {
      "", "{", "[]", "{}", R"({"graph_module": 3})", R"({"graph_module": {"graph": {}}})",
      text.substr(0, text.size() / 2),
      R"({"graph_module": {"graph": {"nodes": [], "inputs": [], "outputs": []}, "signature": {"input_specs": [], "output_specs": []}}})"};
  for (const std::string& b : bad) {
    const std::string what = refusal([&] { stage_model_json(b, p, stages[1], "w.pt2 (models/model.json)"); });
    CHECK(what.rfind("w.pt2 (models/model.json): ", 0) == 0);
    refusal([&] { user_input_batches(b, p, "w"); });
  }
  // Every prefix of the text, and every value of the tree replaced by one of another kind, is
  // refused in one line or gives a stage that reads back: never another exception.
  auto either = [&](const std::string& whole) {
    try {
      parse_exported_program(stage_model_json(whole, p, stages[1], "w"), "stage");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
    try {
      user_input_batches(whole, p, "w");
    } catch (const ConfigError&) {
    }
  };
  for (size_t cut = 0; cut < text.size(); cut += 61) either(text.substr(0, cut));
  const json tree = json::parse(text);
  const json flat = tree.flatten();
  size_t replaced = 0;
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    // Every leaf and every container above one, replaced in turn.
    std::string pointer = it.key();
    while (!pointer.empty()) {
      for (const json& other : {json(3), json("s"), json(nullptr), json::array(), json::object()}) {
        json mutated = tree;
        mutated[json::json_pointer(pointer)] = other;
        either(mutated.dump());
        ++replaced;
      }
      pointer = pointer.substr(0, pointer.rfind('/'));
    }
  }
  CHECK(replaced > 1000);
}
