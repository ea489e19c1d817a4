// libs/exported's program reader without LibTorch: graphs written by hand, each wrong in one way,
// refused in one line naming the file and what (the node where one is at fault).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "libs/base/config_error.h"
#include "libs/exported/exported_program.h"

using namespace ravnest::exported;
using ravnest::base::ConfigError;

namespace {

std::string node(const std::string& name, const std::string& target, const std::string& inputs,
                 const std::string& outputs) {
  return R"({"name":")" + name + R"(","target":")" + target + R"(","inputs":[)" + inputs +
         R"(],"outputs":[)" + outputs + R"(],"metadata":{}})";
}

std::string tensor_in(const std::string& arg, const std::string& name) {
  return R"({"name":")" + arg + R"(","arg":{"as_tensor":{"name":")" + name + R"("}},"kind":1})";
}

std::string tensor_out(const std::string& name) {
  return R"({"as_tensor":{"name":")" + name + R"("}})";
}

// x -> relu -> neg -> output, with `nodes` in place of the two nodes when given.
std::string program(const std::string& nodes = "", const std::string& version = "8, \"minor\": 20",
                    const std::string& output = "b") {
  const std::string body =
      nodes.empty() ? node("a", "torch.ops.aten.relu.default", tensor_in("self", "x"), tensor_out("a")) +
                          "," + node("b", "torch.ops.aten.neg.default", tensor_in("self", "a"), tensor_out("b"))
                    : nodes;
  return R"({"schema_version":{"major":)" + version + R"(},"torch_version":"2.15.0",
    "graph_module":{"graph":{"inputs":[{"as_tensor":{"name":"x"}}],
      "outputs":[{"as_tensor":{"name":")" + output + R"("}}],"nodes":[)" + body + R"(],
      "tensor_values":{},"sym_int_values":{}},
    "signature":{"input_specs":[{"user_input":{"arg":{"as_tensor":{"name":"x"}}}}],
      "output_specs":[{"user_output":{"arg":{"as_tensor":{"name":")" + output + R"("}}}}]}}})";
}

std::string refusal(const std::string& text) {
  try {
    parse_exported_program(text, "m.pt2 (models/model.json)");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.rfind("m.pt2 (models/model.json): ", 0) == 0);
    return what;
  }
  FAIL("accepted");
  return "";
}

}  // namespace

TEST_CASE("a well-formed program is read with its nodes, arguments and signature") {
  const ExportedProgram p = parse_exported_program(program(), "m");
  CHECK(p.schema_major == 8);
  CHECK(p.schema_minor == 20);
  CHECK(p.torch_version == "2.15.0");
  REQUIRE(p.nodes.size() == 2);
  CHECK(p.nodes[0].target == "torch.ops.aten.relu.default");
  CHECK(p.nodes[1].inputs[0].name == "self");
  CHECK(p.nodes[1].inputs[0].arg.name == "a");
  CHECK(p.input_specs.size() == 1);
  CHECK(p.input_specs[0].kind == InputSpec::Kind::kUserInput);
  CHECK(p.output_specs[0].kind == OutputSpec::Kind::kUserOutput);
}

TEST_CASE("operator names and module stacks are read as the dispatcher and eager name them") {
  CHECK(operator_name("torch.ops.aten.conv2d.default").name == "aten::conv2d");
  CHECK(operator_name("torch.ops.aten.conv2d.default").overload == "");
  CHECK(operator_name("torch.ops.aten.add_.Tensor").name == "aten::add_");
  CHECK(operator_name("torch.ops.aten.add_.Tensor").overload == "Tensor");
  CHECK(operator_name("torch.ops.higher_order.cond").name.empty());
  CHECK(operator_name("_operator.mul").name.empty());
  CHECK(is_higher_order("torch.ops.higher_order.while_loop"));
  const std::string stack =
      "L__self__,,__main__.M;L__self__layer_bn,layer.bn,torch.nn.modules.batchnorm.BatchNorm2d";
  CHECK(innermost_module(stack).path == "layer.bn");
  CHECK(innermost_module(stack).type == "torch.nn.modules.batchnorm.BatchNorm2d");
  CHECK(module_stack_has(stack, "torch.nn.modules.batchnorm."));
  CHECK_FALSE(module_stack_has(stack, "torch.nn.modules.activation."));
}

TEST_CASE("every argument kind the runtime runs is read") {
  const std::string inputs =
      tensor_in("self", "x") + R"(,{"name":"i","arg":{"as_int":3}},{"name":"is","arg":{"as_ints":[1,2]}},
      {"name":"f","arg":{"as_float":0.5}},{"name":"fs","arg":{"as_floats":[1.5]}},
      {"name":"b","arg":{"as_bool":true}},{"name":"bs","arg":{"as_bools":[true,false]}},
      {"name":"s","arg":{"as_string":"tanh"}},{"name":"d","arg":{"as_scalar_type":7}},
      {"name":"m","arg":{"as_memory_format":1}},{"name":"l","arg":{"as_layout":7}},
      {"name":"dev","arg":{"as_device":{"type":"cpu","index":null}}},{"name":"n","arg":{"as_none":true}},
      {"name":"ts","arg":{"as_tensors":[{"name":"x"}]}},
      {"name":"ots","arg":{"as_optional_tensors":[{"as_tensor":{"name":"x"}},{"as_none":true}]}},
      {"name":"si","arg":{"as_sym_ints":[{"as_int":4},{"as_name":"x"}]}})";
  const ExportedProgram p = parse_exported_program(
      program(node("b", "torch.ops.aten.foo.default", inputs, tensor_out("b"))), "m");
  const auto& args = p.nodes[0].inputs;
  REQUIRE(args.size() == 16);
  CHECK(args[1].arg.kind == Argument::Kind::kInt);
  CHECK(args[2].arg.integers == std::vector<int64_t>{1, 2});
  CHECK(args[3].arg.real == 0.5);
  CHECK(args[6].arg.integers == std::vector<int64_t>{1, 0});
  CHECK(args[7].arg.text == "tanh");
  CHECK(args[8].arg.kind == Argument::Kind::kScalarType);
  CHECK(args[11].arg.text == "cpu");
  CHECK(args[11].arg.integer == -1);
  CHECK(args[14].arg.names == std::vector<std::string>{"x", ""});
  CHECK(args[15].arg.sym_ints[1].name == "x");
}

TEST_CASE("a schema major newer than supported is refused naming both versions") {
  const std::string what = refusal(program("", "9, \"minor\": 0"));
  CHECK(what.find("schema version 9.0 is newer") != std::string::npos);
  CHECK(what.find("8.x") != std::string::npos);
}

TEST_CASE("JSON of the wrong schema is refused naming the field") {
  CHECK(refusal("[1, 2]").find("(top level)") != std::string::npos);
  CHECK(refusal(R"({"schema_version":{"major":8,"minor":1}})").find("graph_module: is missing") !=
        std::string::npos);
  std::string bad = program();
  bad.replace(bad.find(R"("as_tensor":{"name":"x"})"), 24, R"("as_tensor":{"nome":"x"})");
  CHECK(refusal(bad).find("graph_module.graph.inputs[0].as_tensor.name: is missing") != std::string::npos);
  CHECK(refusal("{\"schema_version\": ").find("m.pt2") == 0);
}

TEST_CASE("a value used before any node defines it (or a cycle) is refused naming the node") {
  const std::string cycle =
      node("a", "torch.ops.aten.relu.default", tensor_in("self", "b"), tensor_out("a")) + "," +
      node("b", "torch.ops.aten.neg.default", tensor_in("self", "a"), tensor_out("b"));
  const std::string what = refusal(program(cycle));
  CHECK(what.find("node 'a' (torch.ops.aten.relu.default): uses 'b' before any node defines it") !=
        std::string::npos);
  const std::string twice =
      node("a", "torch.ops.aten.relu.default", tensor_in("self", "x"), tensor_out("x"));
  CHECK(refusal(program(twice, "8, \"minor\": 20", "x")).find("already defined") != std::string::npos);
  CHECK(refusal(program("", "8, \"minor\": 20", "nowhere")).find("graph output 'nowhere'") !=
        std::string::npos);
}

TEST_CASE("a higher-order op is refused naming the node") {
  const std::string cond = node(
      "cond", "torch.ops.higher_order.cond",
      tensor_in("pred", "x") + R"(,{"name":"true_fn","arg":{"as_graph":{"name":"g","graph":{}}}})",
      tensor_out("b"));
  const std::string what = refusal(program(cond));
  CHECK(what.find("node 'cond' (torch.ops.higher_order.cond): higher-order ops") != std::string::npos);
}

TEST_CASE("an argument of a kind the runtime does not run is refused naming node and argument") {
  const std::string custom = node(
      "b", "torch.ops.aten.relu.default",
      tensor_in("self", "x") + R"(,{"name":"obj","arg":{"as_custom_obj":{"name":"o","class_fqn":"c"}}})",
      tensor_out("b"));
  CHECK(refusal(program(custom)).find("node 'b' (torch.ops.aten.relu.default): argument 'obj' is of kind as_custom_obj") !=
        std::string::npos);
}

TEST_CASE("10^6 nodes are refused after a scan, without a tree of them") {
  const std::string one =
      node("n", "torch.ops.aten.relu.default", tensor_in("self", "x"), tensor_out("x"));
  std::string nodes;
  nodes.reserve((one.size() + 1) * 1000000);
  for (int i = 0; i < 1000000; ++i) nodes += (i ? "," : "") + one;
  const auto start = std::chrono::steady_clock::now();
  const std::string what = refusal(program(nodes));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(what.find("more than 100000 nodes") != std::string::npos);
  CHECK(seconds < 5);
}

TEST_CASE("payload configs: sizes must be numbers, dtypes known, sizes and strides paired") {
  const std::string good = R"({"config":{"fc.weight":{"path_name":"weight_0","is_param":true,
    "use_pickle":false,"tensor_meta":{"dtype":7,"sizes":[{"as_int":3},{"as_int":2}],
    "requires_grad":true,"device":{"type":"cpu","index":null},
    "strides":[{"as_int":2},{"as_int":1}],"storage_offset":{"as_int":0},"layout":7}}}})";
  const PayloadConfig config = parse_payload_config(good, "w");
  REQUIRE(config.count("fc.weight"));
  CHECK(config.at("fc.weight").sizes == std::vector<int64_t>{3, 2});
  CHECK(config.at("fc.weight").requires_grad);
  auto refused = [](std::string text, const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
    try {
      parse_payload_config(text, "w.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused(good, R"("dtype":7)", R"("dtype":99)").find("unknown dtype code 99") != std::string::npos);
  CHECK(refused(good, R"({"as_int":3})", R"({"as_int":-3})").find("must not be negative") != std::string::npos);
  CHECK(refused(good, R"({"as_int":3})", R"({"as_expr":{"expr_str":"s0"}})").find("must be a number") != std::string::npos);
  CHECK(refused(good, R"({"as_int":2},{"as_int":1}])", R"({"as_int":2}])").find("2 sizes but 1 strides") != std::string::npos);
}
