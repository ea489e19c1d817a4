#include "libs/exported/exported_program.h"

#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "libs/base/config_error.h"
#include "libs/base/json_error.h"
#include "libs/base/json_reader.h"
#include "libs/base/printable.h"

namespace ravnest::exported {
namespace {

using json = nlohmann::json;
using base::ConfigError;
using base::JsonReader;

// A scan of the text that builds nothing: counts the graph's nodes and all JSON values, and stops
// at the first limit crossed, so that a huge graph is refused before a tree of it is made.
class SizeScan : public nlohmann::json_sax<json> {
 public:
  size_t nodes = 0;
  size_t values = 0;
  bool over_limit = false;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t& k) override {
    pending_key_ = k;
    return true;
  }
  bool end_object() override {
    path_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override {
    path_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the tree's parse reports it
  }

 private:
  // A value begins at the current depth: a node when it is an element of graph_module.graph.nodes
  // (path: "", "graph_module", "graph", "nodes").
  bool value() {
    if (++values > kMaxJsonValues) over_limit = true;
    if (path_.size() == 4 && path_[1] == "graph_module" && path_[2] == "graph" &&
        path_[3] == "nodes" && pending_key_.empty()) {
      if (++nodes > kMaxNodes) over_limit = true;
    }
    pending_key_.clear();
    return !over_limit;
  }

  // An object or array begins: a value of its parent, and the parent of what follows.
  bool open() {
    std::string key = std::move(pending_key_);
    pending_key_ = key;  // value() reads it to tell an array's element from a member
    if (!value()) return false;
    path_.push_back(std::move(key));
    return true;
  }

  std::vector<std::string> path_;
  std::string pending_key_;
};

// The one member of a union object ({"as_tensor": {...}}): its key and value.
std::pair<std::string, const json*> union_member(const JsonReader& reader, const json& value,
                                                 const std::string& field) {
  if (!value.is_object()) reader.fail(field, "must be an object, got " + JsonReader::kind(value));
  if (value.size() != 1) {
    reader.fail(field, "must hold exactly one member, holds " + std::to_string(value.size()));
  }
  return {value.begin().key(), &value.begin().value()};
}

int64_t as_int64(const JsonReader& reader, const json& value, const std::string& field) {
  return reader.int64(value, field);
}

double as_double(const JsonReader& reader, const json& value, const std::string& field) {
  // Python's json writes inf and nan as Infinity/NaN, which are not JSON; strings stand for them.
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  reader.fail(field, "must be a number, got " + JsonReader::kind(value));
}

bool as_bool(const JsonReader& reader, const json& value, const std::string& field) {
  if (!value.is_boolean()) reader.fail(field, "must be a boolean, got " + JsonReader::kind(value));
  return value.get<bool>();
}

std::string as_string(const JsonReader& reader, const json& value, const std::string& field) {
  if (!value.is_string()) reader.fail(field, "must be a string, got " + JsonReader::kind(value));
  return value.get<std::string>();
}

const json& as_array(const JsonReader& reader, const json& value, const std::string& field) {
  if (!value.is_array()) reader.fail(field, "must be an array, got " + JsonReader::kind(value));
  return value;
}

// A TensorArgument {"name": ...}.
std::string tensor_name(const JsonReader& reader, const json& value, const std::string& field) {
  return reader.string(value, field, "name");
}

// A SymIntArgument ({"as_name"} or {"as_int"}).
SymIntRef sym_int_argument(const JsonReader& reader, const json& value, const std::string& field) {
  const auto [key, member] = union_member(reader, value, field);
  SymIntRef ref;
  if (key == "as_name") {
    ref.name = as_string(reader, *member, field + ".as_name");
    if (ref.name.empty()) reader.fail(field + ".as_name", "must not be empty");
  } else if (key == "as_int") {
    ref.value = as_int64(reader, *member, field + ".as_int");
  } else {
    reader.fail(field, "must be as_name or as_int, got " + key);
  }
  return ref;
}

// An OptionalTensorArgument ({"as_tensor": {...}} or {"as_none": ...}): the name, "" for None.
std::string optional_tensor(const JsonReader& reader, const json& value, const std::string& field) {
  const auto [key, member] = union_member(reader, value, field);
  if (key == "as_tensor") return tensor_name(reader, *member, field + ".as_tensor");
  if (key == "as_none") return "";
  reader.fail(field, "must be as_tensor or as_none, got " + key);
}

Argument parse_argument(const JsonReader& reader, const json& value, const std::string& field) {
  const auto [key, member_ptr] = union_member(reader, value, field);
  const json& m = *member_ptr;
  const std::string f = field + "." + key;
  Argument a;
  using K = Argument::Kind;
  if (key == "as_none") {
    a.kind = K::kNone;
  } else if (key == "as_tensor") {
    a.kind = K::kTensor;
    a.name = tensor_name(reader, m, f);
  } else if (key == "as_tensors") {
    a.kind = K::kTensors;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.names.push_back(tensor_name(reader, m[i], JsonReader::index(f, i)));
    }
  } else if (key == "as_optional_tensor") {
    a.kind = K::kOptionalTensor;
    a.name = optional_tensor(reader, m, f);
  } else if (key == "as_optional_tensors") {
    a.kind = K::kOptionalTensors;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.names.push_back(optional_tensor(reader, m[i], JsonReader::index(f, i)));
    }
  } else if (key == "as_int") {
    a.kind = K::kInt;
    a.integer = as_int64(reader, m, f);
  } else if (key == "as_ints") {
    a.kind = K::kInts;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.integers.push_back(as_int64(reader, m[i], JsonReader::index(f, i)));
    }
  } else if (key == "as_float") {
    a.kind = K::kFloat;
    a.real = as_double(reader, m, f);
  } else if (key == "as_floats") {
    a.kind = K::kFloats;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.reals.push_back(as_double(reader, m[i], JsonReader::index(f, i)));
    }
  } else if (key == "as_bool") {
    a.kind = K::kBool;
    a.integer = as_bool(reader, m, f) ? 1 : 0;
  } else if (key == "as_bools") {
    a.kind = K::kBools;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.integers.push_back(as_bool(reader, m[i], JsonReader::index(f, i)) ? 1 : 0);
    }
  } else if (key == "as_string") {
    a.kind = K::kString;
    a.text = as_string(reader, m, f);
  } else if (key == "as_strings") {
    a.kind = K::kStrings;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.strings.push_back(as_string(reader, m[i], JsonReader::index(f, i)));
    }
  } else if (key == "as_scalar_type" || key == "as_memory_format" || key == "as_layout") {
    a.kind = key == "as_scalar_type"     ? K::kScalarType
             : key == "as_memory_format" ? K::kMemoryFormat
                                         : K::kLayout;
    a.integer = as_int64(reader, m, f);
  } else if (key == "as_device") {
    a.kind = K::kDevice;
    a.text = reader.string(m, f, "type");
    const auto index = m.find("index");
    a.integer = (index == m.end() || index->is_null()) ? -1 : as_int64(reader, *index, f + ".index");
  } else if (key == "as_sym_int") {
    a.kind = K::kSymInt;
    a.sym_ints.push_back(sym_int_argument(reader, m, f));
  } else if (key == "as_sym_ints") {
    a.kind = K::kSymInts;
    for (size_t i = 0; i < as_array(reader, m, f).size(); ++i) {
      a.sym_ints.push_back(sym_int_argument(reader, m[i], JsonReader::index(f, i)));
    }
  } else {
    a.kind = K::kUnsupported;
    a.text = base::printable(key, 60);
  }
  return a;
}

// A size in a TensorMeta of a payload: a number (a weight's shape is never symbolic).
int64_t concrete_size(const JsonReader& reader, const json& value, const std::string& field) {
  const SymIntRef ref = [&] {
    const auto [key, member] = union_member(reader, value, field);
    if (key == "as_int") return SymIntRef{"", as_int64(reader, *member, field + ".as_int")};
    reader.fail(field, "must be a number (as_int), got " + key);
  }();
  if (ref.value < 0) reader.fail(field, "must not be negative, got " + std::to_string(ref.value));
  return ref.value;
}

InputSpec parse_input_spec(const JsonReader& reader, const json& value, const std::string& field) {
  const auto [key, m] = union_member(reader, value, field);
  const std::string f = field + "." + key;
  InputSpec spec;
  auto placeholder = [&](const std::string& name) {
    Argument a;
    a.kind = Argument::Kind::kTensor;
    a.name = name;
    return a;
  };
  if (key == "user_input") {
    spec.kind = InputSpec::Kind::kUserInput;
    spec.arg = parse_argument(reader, reader.member(*m, f, "arg"), f + ".arg");
  } else if (key == "parameter") {
    spec.kind = InputSpec::Kind::kParameter;
    spec.arg = placeholder(tensor_name(reader, reader.member(*m, f, "arg"), f + ".arg"));
    spec.target = reader.string(*m, f, "parameter_name");
  } else if (key == "buffer") {
    spec.kind = InputSpec::Kind::kBuffer;
    spec.arg = placeholder(tensor_name(reader, reader.member(*m, f, "arg"), f + ".arg"));
    spec.target = reader.string(*m, f, "buffer_name");
    spec.persistent = reader.boolean(*m, f, "persistent");
  } else if (key == "tensor_constant") {
    spec.kind = InputSpec::Kind::kTensorConstant;
    spec.arg = placeholder(tensor_name(reader, reader.member(*m, f, "arg"), f + ".arg"));
    spec.target = reader.string(*m, f, "tensor_constant_name");
  } else if (key == "constant_input") {
    spec.kind = InputSpec::Kind::kConstantInput;
    spec.arg = placeholder(reader.string(*m, f, "name"));
    spec.constant = parse_argument(reader, reader.member(*m, f, "value"), f + ".value");
  } else {
    spec.kind = InputSpec::Kind::kUnsupported;
    spec.target = base::printable(key, 60);
  }
  return spec;
}

OutputSpec parse_output_spec(const JsonReader& reader, const json& value, const std::string& field) {
  const auto [key, m] = union_member(reader, value, field);
  const std::string f = field + "." + key;
  OutputSpec spec;
  using K = OutputSpec::Kind;
  struct Known {
    const char* key;
    K kind;
    const char* target;
  };
  static const Known known[] = {{"user_output", K::kUserOutput, nullptr},
                                {"loss_output", K::kLossOutput, nullptr},
                                {"buffer_mutation", K::kBufferMutation, "buffer_name"},
                                {"parameter_mutation", K::kParameterMutation, "parameter_name"},
                                {"user_input_mutation", K::kUserInputMutation, "user_input_name"}};
  for (const Known& k : known) {
    if (key != k.key) continue;
    spec.kind = k.kind;
    const json& arg = reader.member(*m, f, "arg");
    if (k.kind == K::kUserOutput) {
      spec.arg = parse_argument(reader, arg, f + ".arg");
    } else {
      spec.arg.kind = Argument::Kind::kTensor;
      spec.arg.name = tensor_name(reader, arg, f + ".arg");
    }
    if (k.target) spec.target = reader.string(*m, f, k.target);
    return spec;
  }
  spec.kind = K::kUnsupported;
  spec.target = base::printable(key, 60);
  return spec;
}

Node parse_node(const JsonReader& reader, const json& value, const std::string& field) {
  Node node;
  node.target = reader.string(value, field, "target");
  const auto name = value.find("name");
  if (name != value.end() && !name->is_null()) node.name = as_string(reader, *name, field + ".name");
  const json& inputs = reader.array(value, field, "inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string f = JsonReader::index(field + ".inputs", i);
    node.inputs.push_back(
        {reader.string(inputs[i], f, "name"), parse_argument(reader, reader.member(inputs[i], f, "arg"), f + ".arg")});
  }
  const json& outputs = reader.array(value, field, "outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    node.outputs.push_back(parse_argument(reader, outputs[i], JsonReader::index(field + ".outputs", i)));
  }
  const auto metadata = value.find("metadata");
  if (metadata != value.end() && metadata->is_object()) {
    const auto stack = metadata->find("nn_module_stack");
    if (stack != metadata->end() && stack->is_string()) node.nn_module_stack = stack->get<std::string>();
  }
  return node;
}

// The graph as a program: every value defined once, before its first use.
void check_graph(const ExportedProgram& program, const std::string& origin) {
  auto fail = [&](const std::string& what) { throw ConfigError(origin + ": " + what); };
  std::unordered_set<std::string> defined;
  auto define = [&](const std::string& name, const std::string& by) {
    if (name.empty()) return;
    if (!defined.insert(name).second) {
      fail(by + " defines '" + base::printable(name, 100) + "', which is already defined");
    }
  };
  for (const Argument& input : program.inputs) {
    for (const std::string& name : input.value_names()) define(name, "a graph input");
  }
  for (const Node& node : program.nodes) {
    if (is_higher_order(node.target)) {
      fail(node.label() + ": higher-order ops (cond, while_loop, map, ...) are not run; export "
           "the model without data-dependent control flow");
    }
    for (const NamedArgument& input : node.inputs) {
      if (input.arg.kind == Argument::Kind::kUnsupported) {
        fail(node.label() + ": argument '" + base::printable(input.name, 60) + "' is of kind " +
             input.arg.text + ", which is not run");
      }
      for (const std::string& name : input.arg.value_names()) {
        if (!name.empty() && !defined.count(name)) {
          fail(node.label() + ": uses '" + base::printable(name, 100) +
               "' before any node defines it (the graph is out of order or has a cycle)");
        }
      }
    }
    for (const Argument& output : node.outputs) {
      for (const std::string& name : output.value_names()) define(name, node.label());
    }
  }
  for (const Argument& output : program.outputs) {
    for (const std::string& name : output.value_names()) {
      if (!name.empty() && !defined.count(name)) {
        fail("graph output '" + base::printable(name, 100) + "' is not defined by any node");
      }
    }
  }
  if (program.input_specs.size() != program.inputs.size()) {
    fail("the signature has " + std::to_string(program.input_specs.size()) + " input specs for " +
         std::to_string(program.inputs.size()) + " graph inputs");
  }
  if (program.output_specs.size() != program.outputs.size()) {
    fail("the signature has " + std::to_string(program.output_specs.size()) +
         " output specs for " + std::to_string(program.outputs.size()) + " graph outputs");
  }
}

}  // namespace

std::vector<std::string> Argument::value_names() const {
  switch (kind) {
    case Kind::kTensor:
    case Kind::kOptionalTensor:
      return {name};
    case Kind::kTensors:
    case Kind::kOptionalTensors:
      return names;
    case Kind::kSymInt:
    case Kind::kSymInts: {
      std::vector<std::string> out;
      for (const SymIntRef& s : sym_ints) {
        if (!s.name.empty()) out.push_back(s.name);
      }
      return out;
    }
    default:
      return {};
  }
}

std::string Node::label() const {
  return "node '" + base::printable(name.empty() ? "?" : name, 100) + "' (" +
         base::printable(target, 120) + ")";
}

ExportedProgram parse_exported_program(const std::string& json_text, const std::string& origin) {
  if (json_text.size() > kMaxModelJsonBytes) {
    throw ConfigError(origin + ": " + std::to_string(json_text.size()) + " bytes, more than the " +
                      std::to_string(kMaxModelJsonBytes >> 20) + " MiB a graph may have");
  }
  SizeScan scan;
  json::sax_parse(json_text, &scan);
  if (scan.over_limit) {
    throw ConfigError(origin + ": " +
                      (scan.nodes > kMaxNodes
                           ? "more than " + std::to_string(kMaxNodes) + " nodes"
                           : "more than " + std::to_string(kMaxJsonValues) + " JSON values") +
                      ", beyond what a graph may have");
  }
  const JsonReader reader(origin);
  const json root = reader.parse_object(json_text);
  ExportedProgram program;
  const json& version = reader.object(root, "", "schema_version");
  program.schema_major = reader.integer(version, "schema_version", "major");
  program.schema_minor = reader.integer(version, "schema_version", "minor");
  if (program.schema_major > kSupportedSchemaMajor) {
    throw ConfigError(origin + ": schema version " + std::to_string(program.schema_major) + "." +
                      std::to_string(program.schema_minor) + " is newer than this reader's " +
                      std::to_string(kSupportedSchemaMajor) +
                      ".x; export with an older torch or update ravnest");
  }
  if (program.schema_major < 1) reader.fail("schema_version.major", "must be at least 1");
  const auto torch_version = root.find("torch_version");
  if (torch_version != root.end() && torch_version->is_string()) {
    program.torch_version = base::printable(torch_version->get<std::string>(), 40);
  }
  const json& module = reader.object(root, "", "graph_module");
  const json& graph = reader.object(module, "graph_module", "graph");
  const std::string g = "graph_module.graph";
  const json& inputs = reader.array(graph, g, "inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    program.inputs.push_back(parse_argument(reader, inputs[i], JsonReader::index(g + ".inputs", i)));
  }
  const json& outputs = reader.array(graph, g, "outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    program.outputs.push_back(parse_argument(reader, outputs[i], JsonReader::index(g + ".outputs", i)));
  }
  const json& nodes = reader.array(graph, g, "nodes");
  program.nodes.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    program.nodes.push_back(parse_node(reader, nodes[i], JsonReader::index(g + ".nodes", i)));
  }
  const json& signature = reader.object(module, "graph_module", "signature");
  const std::string s = "graph_module.signature";
  const json& input_specs = reader.array(signature, s, "input_specs");
  for (size_t i = 0; i < input_specs.size(); ++i) {
    program.input_specs.push_back(
        parse_input_spec(reader, input_specs[i], JsonReader::index(s + ".input_specs", i)));
  }
  const json& output_specs = reader.array(signature, s, "output_specs");
  for (size_t i = 0; i < output_specs.size(); ++i) {
    program.output_specs.push_back(
        parse_output_spec(reader, output_specs[i], JsonReader::index(s + ".output_specs", i)));
  }
  check_graph(program, origin);
  return program;
}

PayloadConfig parse_payload_config(const std::string& json_text, const std::string& origin) {
  const JsonReader reader(origin);
  const json root = reader.parse_object(json_text);
  const json& config = reader.object(root, "", "config");
  PayloadConfig out;
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string f = JsonReader::join("config", it.key());
    const json& entry = it.value();
    PayloadTensor t;
    t.path_name = reader.string(entry, f, "path_name");
    t.is_param = reader.boolean(entry, f, "is_param");
    t.use_pickle = reader.boolean(entry, f, "use_pickle");
    const auto meta_it = entry.find("tensor_meta");
    if (meta_it == entry.end() || meta_it->is_null()) {
      if (!t.use_pickle) reader.fail(f + ".tensor_meta", "is missing");
      out.emplace(it.key(), std::move(t));
      continue;
    }
    const json& meta = *meta_it;
    const std::string m = f + ".tensor_meta";
    t.dtype = reader.integer(meta, m, "dtype");
    if (scalar_type_size(t.dtype) == 0) {
      reader.fail(m + ".dtype", "unknown dtype code " + std::to_string(t.dtype));
    }
    const json& sizes = reader.array(meta, m, "sizes");
    const json& strides = reader.array(meta, m, "strides");
    if (sizes.size() != strides.size()) {
      reader.fail(m, std::to_string(sizes.size()) + " sizes but " +
                         std::to_string(strides.size()) + " strides");
    }
    if (sizes.size() > 64) reader.fail(m + ".sizes", "more than 64 dimensions");
    for (size_t i = 0; i < sizes.size(); ++i) {
      t.sizes.push_back(concrete_size(reader, sizes[i], JsonReader::index(m + ".sizes", i)));
      t.strides.push_back(concrete_size(reader, strides[i], JsonReader::index(m + ".strides", i)));
    }
    t.storage_offset = concrete_size(reader, reader.member(meta, m, "storage_offset"),
                                     m + ".storage_offset");
    t.requires_grad = reader.boolean(meta, m, "requires_grad");
    t.device_type = reader.string(reader.object(meta, m, "device"), m + ".device", "type");
    out.emplace(it.key(), std::move(t));
  }
  return out;
}

OperatorName operator_name(const std::string& target) {
  static const std::string prefix = "torch.ops.";
  if (target.compare(0, prefix.size(), prefix) != 0 || is_higher_order(target)) return {};
  const std::string rest = target.substr(prefix.size());
  const size_t first = rest.find('.');
  const size_t last = rest.rfind('.');
  if (first == std::string::npos || last == first || first == 0 || last + 1 == rest.size()) {
    return {};
  }
  const std::string overload = rest.substr(last + 1);
  return {rest.substr(0, first) + "::" + rest.substr(first + 1, last - first - 1),
          overload == "default" ? "" : overload};
}

bool is_higher_order(const std::string& target) {
  static const std::string prefix = "torch.ops.higher_order.";
  return target.compare(0, prefix.size(), prefix) == 0;
}

namespace {
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}
}  // namespace

ModuleFrame innermost_module(const std::string& nn_module_stack) {
  if (nn_module_stack.empty()) return {};
  const std::vector<std::string> frames = split(nn_module_stack, ';');
  const std::vector<std::string> fields = split(frames.back(), ',');
  if (fields.size() < 3) return {};
  return {fields[1], fields[fields.size() - 1]};
}

bool module_stack_has(const std::string& nn_module_stack, const std::string& type_prefix) {
  for (const std::string& frame : split(nn_module_stack, ';')) {
    const std::vector<std::string> fields = split(frame, ',');
    if (fields.size() >= 3 && fields.back().compare(0, type_prefix.size(), type_prefix) == 0) {
      return true;
    }
  }
  return false;
}

size_t scalar_type_size(int code) {
  switch (code) {
    case 1: case 2: case 12: case 29: case 30: case 31: case 32: case 33: return 1;  // byte, char, bool, fp8
    case 3: case 6: case 13: case 28: return 2;  // short, half, bfloat16, uint16
    case 4: case 7: case 34: return 4;           // int, float, uint32
    case 9: return 4;                            // complex half
    case 5: case 8: case 10: case 35: return 8;  // long, double, complex float, uint64
    case 11: return 16;  // complex double
    default: return 0;
  }
}

}  // namespace ravnest::exported
