// Long because: the three steps of a cut (units and their cut rules, the stages' wiring, each
// stage's model.json) share the helpers that name what a node reads, writes and defines; the
// model.json step (stage_model_json, user_input_batches) is the one to move out first.
#include "libs/exported/exported_cut.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "libs/base/config_error.h"
#include "libs/base/json_reader.h"
#include "libs/base/printable.h"

namespace ravnest::exported {
namespace {

using json = nlohmann::json;
using base::ConfigError;
using base::JsonReader;
using Kind = Argument::Kind;

bool is_state(InputSpec::Kind kind) {
  return kind == InputSpec::Kind::kParameter || kind == InputSpec::Kind::kBuffer ||
         kind == InputSpec::Kind::kTensorConstant;
}

// The placeholder name of an input spec ("" for a user input the export made a constant).
std::string placeholder_of(const InputSpec& spec) {
  const std::vector<std::string> names = spec.arg.value_names();
  return names.size() == 1 ? names[0] : "";
}

// "Tensor" or "int" for a named value's argument; what the argument is for a constant one.
std::string kind_of(const Argument& arg) {
  switch (arg.kind) {
    case Kind::kTensor:
    case Kind::kOptionalTensor:
    case Kind::kTensors:
    case Kind::kOptionalTensors:
      return "Tensor";
    case Kind::kSymInt:
    case Kind::kInt:
      return "int";
    case Kind::kFloat: return "float";
    case Kind::kBool: return "bool";
    case Kind::kNone: return "None";
    case Kind::kString: return "str";
    default: return "other";
  }
}

std::string op_name(const Node& node) {
  const OperatorName name = operator_name(node.target);
  return name.name.empty() ? node.target : name.name;
}

// Ops that may return their first tensor argument or a view of it (native_functions.yaml's
// `Tensor(a) self -> Tensor(a)`, and those that return the input itself when there is nothing to
// do: contiguous, to, dropout in eval).
bool is_view_like(const std::string& op) {
  static const std::unordered_set<std::string> views = {
      "aten::view", "aten::_unsafe_view", "aten::view_as", "aten::reshape", "aten::reshape_as",
      "aten::_reshape_alias", "aten::flatten", "aten::unflatten", "aten::squeeze",
      "aten::unsqueeze", "aten::transpose", "aten::t", "aten::permute", "aten::expand",
      "aten::expand_as", "aten::select", "aten::slice", "aten::narrow", "aten::split",
      "aten::split_with_sizes", "aten::unsafe_split", "aten::chunk", "aten::unbind",
      "aten::tensor_split", "aten::hsplit", "aten::vsplit", "aten::dsplit", "aten::diagonal",
      "aten::as_strided", "aten::alias", "aten::detach", "aten::contiguous", "aten::movedim",
      "aten::moveaxis", "aten::swapaxes", "aten::swapdims", "aten::real", "aten::imag",
      "aten::view_as_real", "aten::view_as_complex", "aten::unfold", "aten::numpy_T",
      "aten::matrix_H", "aten::mT", "aten::mH", "aten::adjoint", "aten::to", "aten::type_as",
      "aten::lift_fresh", "aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
      "aten::feature_alpha_dropout", "aten::align_as", "aten::refine_names", "aten::rename",
      "aten::indices", "aten::values", "aten::crow_indices", "aten::col_indices",
      "aten::_autocast_to_reduced_precision", "aten::_autocast_to_full_precision",
      "aten::broadcast_tensors", "aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d",
      "aten::squeeze_copy"};
  return views.count(op) != 0;
}

bool is_batch_norm_family(const std::string& op) {
  return op == "aten::batch_norm" || op == "aten::native_batch_norm" ||
         op == "aten::_native_batch_norm_legit" || op == "aten::_batch_norm_with_update" ||
         op == "aten::cudnn_batch_norm" || op == "aten::miopen_batch_norm" ||
         op == "aten::_batch_norm_impl_index" || op == "aten::instance_norm";
}

// Whether an op name is in place: a trailing '_' (not a dunder but the in-place ones).
bool writes_first_argument(const std::string& op) {
  const size_t colons = op.find("::");
  const std::string base = colons == std::string::npos ? op : op.substr(colons + 2);
  if (base.size() < 2 || base.back() != '_') return false;
  if (base.size() >= 4 && base.compare(0, 2, "__") == 0 && base.compare(base.size() - 2, 2, "__") == 0) {
    static const std::unordered_set<std::string> inplace_dunders = {
        "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__iadd__", "__isub__",
        "__imul__", "__idiv__", "__imod__", "__ipow__"};
    return inplace_dunders.count(base) != 0;
  }
  return true;
}

// The value names a node writes in place (see the header's rules).
std::vector<std::string> written_names(const Node& node) {
  const std::string op = op_name(node);
  std::vector<std::string> out;
  auto add = [&](const Argument& arg) {
    for (const std::string& n : arg.value_names()) {
      if (!n.empty()) out.push_back(n);
    }
  };
  if (writes_first_argument(op) && !node.inputs.empty()) add(node.inputs[0].arg);
  for (const NamedArgument& input : node.inputs) {
    if (input.name == "out") add(input.arg);
  }
  if (is_batch_norm_family(op)) {
    bool training = true;
    for (const NamedArgument& input : node.inputs) {
      if ((input.name == "training" || input.name == "use_input_stats") &&
          input.arg.kind == Kind::kBool) {
        training = input.arg.integer != 0;
      }
    }
    if (training || op == "aten::_batch_norm_with_update") {
      for (const NamedArgument& input : node.inputs) {
        if (input.name == "running_mean" || input.name == "running_var") add(input.arg);
      }
    }
  }
  return out;
}

// Every value name a node reads.
std::vector<std::string> read_names(const Node& node) {
  std::vector<std::string> out;
  for (const NamedArgument& input : node.inputs) {
    for (const std::string& n : input.arg.value_names()) {
      if (!n.empty()) out.push_back(n);
    }
  }
  return out;
}

std::vector<std::string> defined_names(const Node& node) {
  std::vector<std::string> out;
  for (const Argument& output : node.outputs) {
    for (const std::string& n : output.value_names()) {
      if (!n.empty()) out.push_back(n);
    }
  }
  return out;
}

bool is_mutation(OutputSpec::Kind kind) {
  return kind == OutputSpec::Kind::kBufferMutation || kind == OutputSpec::Kind::kParameterMutation ||
         kind == OutputSpec::Kind::kUserInputMutation;
}

// Placeholder name -> index of its input spec, for state and constant inputs.
std::unordered_map<std::string, size_t> state_placeholders(const ExportedProgram& program) {
  std::unordered_map<std::string, size_t> out;
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    const InputSpec& spec = program.input_specs[i];
    if (is_state(spec.kind) || spec.kind == InputSpec::Kind::kConstantInput) {
      const std::string name = placeholder_of(spec);
      if (!name.empty()) out.emplace(name, i);
    }
  }
  return out;
}

size_t stage_of_unit(const std::vector<std::pair<size_t, size_t>>& ranges, size_t unit) {
  for (size_t s = 0; s < ranges.size(); ++s) {
    if (unit >= ranges[s].first && unit < ranges[s].second) return s;
  }
  throw std::logic_error("exported_cut: unit " + std::to_string(unit) + " is in no stage");
}

}  // namespace

ProgramUnits program_units(const ExportedProgram& program) {
  ProgramUnits units;
  const int n = static_cast<int>(program.nodes.size());
  const auto state = state_placeholders(program);

  for (const Node& node : program.nodes) {
    // Nodes export found no module for carry a placeholder frame, which names none.
    const ModuleFrame frame = innermost_module(node.nn_module_stack);
    const bool named = !frame.path.empty() && frame.path.rfind("_empty_nn_module_stack", 0) != 0;
    units.labels.push_back(op_name(node) + (named ? " " + frame.path : ""));
  }

  auto add_value = [&](const std::string& name, const std::string& kind, int unit) {
    units.value_index.emplace(name, units.values.size());
    units.values.push_back({name, kind, unit, unit});
  };
  for (const InputSpec& spec : program.input_specs) {
    if (spec.kind != InputSpec::Kind::kUserInput) continue;
    for (const std::string& name : spec.arg.value_names()) {
      if (!name.empty()) add_value(name, kind_of(spec.arg), -1);
    }
  }
  for (int u = 0; u < n; ++u) {
    for (const Argument& output : program.nodes[u].outputs) {
      for (const std::string& name : output.value_names()) {
        if (!name.empty()) add_value(name, kind_of(output), u);
      }
    }
  }
  auto value_of = [&](const std::string& name) -> ProgramValue* {
    const auto it = units.value_index.find(name);
    return it == units.value_index.end() ? nullptr : &units.values[it->second];
  };
  for (int u = 0; u < n; ++u) {
    for (const std::string& name : read_names(program.nodes[u])) {
      if (ProgramValue* v = value_of(name)) v->last_used_at = std::max(v->last_used_at, u);
    }
  }
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    if (is_mutation(program.output_specs[i].kind)) continue;  // written back where defined
    for (const std::string& name : program.outputs[i].value_names()) {
      if (ProgramValue* v = value_of(name)) v->last_used_at = n;
    }
  }

  units.cut_allowed.assign(n > 0 ? n - 1 : 0, true);
  units.crossing.assign(units.cut_allowed.size(), {});
  auto forbid = [&](int from, int to) {  // boundaries [from, to)
    for (int i = std::max(from, 0); i < std::min(to, n - 1); ++i) units.cut_allowed[i] = false;
  };

  // What each value may be or view: itself, or for a view or an in-place op's output what its
  // argument views. Bases are placeholders (state, user inputs) and fresh node outputs.
  std::unordered_map<std::string, std::vector<std::string>> bases;
  auto bases_of = [&](const std::string& name) -> std::vector<std::string> {
    const auto it = bases.find(name);
    return it == bases.end() ? std::vector<std::string>{name} : it->second;
  };
  // State placeholder -> units touching it; whether written.
  std::map<size_t, std::vector<int>> accessors;
  std::set<size_t> mutated;
  for (int u = 0; u < n; ++u) {
    const Node& node = program.nodes[u];
    const std::string op = op_name(node);
    for (const std::string& name : read_names(node)) {
      const auto s = state.find(name);
      if (s != state.end()) accessors[s->second].push_back(u);
    }
    const std::vector<std::string> written = written_names(node);
    std::vector<std::string> written_bases;
    for (const std::string& w : written) {
      for (const std::string& b : bases_of(w)) written_bases.push_back(b);
    }
    for (const std::string& b : written_bases) {
      const auto s = state.find(b);
      if (s != state.end() && is_state(program.input_specs[s->second].kind)) {
        accessors[s->second].push_back(u);
        mutated.insert(s->second);
      } else if (ProgramValue* v = value_of(b)) {
        if (v->defined_at < u) forbid(v->defined_at, u);
      }
    }
    // What the outputs view: an in-place op's target, an out= op's out, a view's argument.
    std::vector<std::string> viewed;
    if (!written.empty() && !is_batch_norm_family(op)) {
      viewed = written_bases;
    } else if (is_view_like(op)) {
      for (const NamedArgument& input : node.inputs) {
        if (input.arg.kind == Kind::kTensor || input.arg.kind == Kind::kTensors) {
          for (const std::string& name : input.arg.value_names()) {
            for (const std::string& b : bases_of(name)) viewed.push_back(b);
          }
          break;
        }
      }
    }
    if (viewed.empty()) continue;
    std::sort(viewed.begin(), viewed.end());
    viewed.erase(std::unique(viewed.begin(), viewed.end()), viewed.end());
    for (const Argument& output : node.outputs) {
      if (output.kind != Kind::kTensor && output.kind != Kind::kTensors &&
          output.kind != Kind::kOptionalTensor && output.kind != Kind::kOptionalTensors) {
        continue;
      }
      for (const std::string& name : output.value_names()) {
        if (!name.empty()) bases[name] = viewed;
      }
    }
  }
  // Mutations the graph returns rather than does in place: the defining unit writes the state (or
  // the user input, which only the root holds).
  std::unordered_map<std::string, size_t> spec_of_target;
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    if (is_state(program.input_specs[i].kind)) spec_of_target.emplace(program.input_specs[i].target, i);
  }
  for (const OutputSpec& spec : program.output_specs) {
    if (!is_mutation(spec.kind)) continue;
    const ProgramValue* v = value_of(spec.arg.name);
    const int unit = v ? v->defined_at : -1;
    if (spec.kind == OutputSpec::Kind::kUserInputMutation) {
      forbid(-1, unit);
      continue;
    }
    const auto s = spec_of_target.find(spec.target);
    if (s == spec_of_target.end()) continue;
    mutated.insert(s->second);
    if (unit >= 0) accessors[s->second].push_back(unit);
  }
  for (const auto& [spec, touching] : accessors) {
    if (!mutated.count(spec) || touching.empty()) continue;
    const auto [lo, hi] = std::minmax_element(touching.begin(), touching.end());
    forbid(*lo, *hi);
  }
  for (size_t spec : mutated) units.mutated_state.push_back(program.input_specs[spec].target);

  for (size_t i = 0; i < units.values.size(); ++i) {
    const ProgramValue& v = units.values[i];
    if (v.kind != "Tensor" && v.kind != "int") forbid(v.defined_at, v.last_used_at);
    for (int b = std::max(v.defined_at, 0); b < std::min(v.last_used_at, n - 1); ++b) {
      units.crossing[b].push_back(i);
    }
  }

  units.first_state.assign(n, {});
  std::unordered_set<size_t> seen;
  for (int u = 0; u < n; ++u) {
    for (const std::string& name : read_names(program.nodes[u])) {
      const auto s = state.find(name);
      if (s == state.end() || !is_state(program.input_specs[s->second].kind)) continue;
      if (seen.insert(s->second).second) {
        units.first_state[u].push_back(program.input_specs[s->second].target);
      }
    }
  }
  return units;
}

std::vector<ProgramStage> wire_program_stages(const ExportedProgram& program,
                                              const ProgramUnits& units,
                                              const std::vector<std::pair<size_t, size_t>>& ranges) {
  const size_t n = program.nodes.size();
  if (units.size() != n) throw std::invalid_argument("wire_program_stages: units of another program");
  if (ranges.empty()) throw std::invalid_argument("wire_program_stages: no stages");
  for (size_t s = 0; s < ranges.size(); ++s) {
    const auto [first, end] = ranges[s];
    const size_t expected = s == 0 ? 0 : ranges[s - 1].second;
    if (first != expected || end < first || (end == first && n > 0) || end > n) {
      throw std::invalid_argument("wire_program_stages: stage " + std::to_string(s) + " [" +
                                  std::to_string(first) + ", " + std::to_string(end) +
                                  ") does not continue the ranges before it over " +
                                  std::to_string(n) + " units");
    }
    if (s > 0 && !units.cut_allowed.at(first - 1)) {
      throw std::invalid_argument("wire_program_stages: a cut after unit " +
                                  std::to_string(first - 1) + " (" + units.labels[first - 1] +
                                  ") is not allowed");
    }
  }
  if (ranges.back().second != n) {
    throw std::invalid_argument("wire_program_stages: the ranges end at unit " +
                                std::to_string(ranges.back().second) + " of " + std::to_string(n));
  }

  std::vector<ProgramStage> stages(ranges.size());
  for (size_t s = 0; s < ranges.size(); ++s) {
    stages[s].first_unit = ranges[s].first;
    stages[s].end_unit = ranges[s].second;
    stages[s].is_leaf = s + 1 == ranges.size();
  }
  ProgramStage& root = stages.front();
  int model_input = 0;
  for (const InputSpec& spec : program.input_specs) {
    if (spec.kind != InputSpec::Kind::kUserInput) continue;
    root.inputs.push_back(placeholder_of(spec));
    root.input_types.push_back(kind_of(spec.arg));
    root.input_sources.push_back({model_input++, -1, -1});
  }

  // Consumers of every value: the stages of the units reading it, the leaf when a user output.
  const int leaf = static_cast<int>(ranges.size()) - 1;
  std::vector<std::set<int>> consumers(units.values.size());
  auto value_at = [&](const std::string& name) -> int {
    const auto it = units.value_index.find(name);
    return it == units.value_index.end() ? -1 : static_cast<int>(it->second);
  };
  for (size_t u = 0; u < n; ++u) {
    const int stage = static_cast<int>(stage_of_unit(ranges, u));
    for (const std::string& name : read_names(program.nodes[u])) {
      const int v = value_at(name);
      if (v >= 0) consumers[v].insert(stage);
    }
  }
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const OutputSpec::Kind kind = program.output_specs[i].kind;
    if (kind != OutputSpec::Kind::kUserOutput && kind != OutputSpec::Kind::kLossOutput) continue;
    for (const std::string& name : program.outputs[i].value_names()) {
      const int v = value_at(name);
      if (v >= 0) consumers[v].insert(leaf);
    }
  }
  std::vector<std::pair<int, int>> produced_as(units.values.size(), {-1, -1});
  for (size_t v = 0; v < units.values.size(); ++v) {
    const ProgramValue& value = units.values[v];
    const int producer =
        value.defined_at < 0 ? 0 : static_cast<int>(stage_of_unit(ranges, value.defined_at));
    consumers[v].erase(producer);
    if (consumers[v].empty()) continue;
    ProgramStage& owner = stages[producer];
    produced_as[v] = {producer, static_cast<int>(owner.outputs.size())};
    owner.outputs.push_back(value.name);
    owner.output_types.push_back(value.kind);
    owner.output_consumers.emplace_back(consumers[v].begin(), consumers[v].end());
  }
  for (size_t v = 0; v < units.values.size(); ++v) {
    const auto [producer, output] = produced_as[v];
    if (producer < 0) continue;
    for (int consumer : stages[producer].output_consumers[output]) {
      stages[consumer].inputs.push_back(units.values[v].name);
      stages[consumer].input_types.push_back(units.values[v].kind);
      stages[consumer].input_sources.push_back({-1, producer, output});
    }
  }
  if (!stages.back().outputs.empty()) throw std::logic_error("wire_program_stages: the leaf has outputs");

  // State: what each stage's nodes read, what it writes back, what the leaf returns; the rest to
  // the root.
  const auto placeholders = state_placeholders(program);
  std::vector<std::vector<bool>> holds(stages.size(), std::vector<bool>(program.input_specs.size()));
  std::vector<bool> held(program.input_specs.size());
  auto hold = [&](size_t stage, const std::string& name) {
    const auto it = placeholders.find(name);
    if (it == placeholders.end()) return;
    holds[stage][it->second] = true;
    held[it->second] = true;
  };
  for (size_t u = 0; u < n; ++u) {
    const size_t stage = stage_of_unit(ranges, u);
    for (const std::string& name : read_names(program.nodes[u])) hold(stage, name);
  }
  std::unordered_map<std::string, std::string> placeholder_of_target;
  for (const InputSpec& spec : program.input_specs) {
    if (is_state(spec.kind)) placeholder_of_target.emplace(spec.target, placeholder_of(spec));
  }
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const OutputSpec& spec = program.output_specs[i];
    if (spec.kind == OutputSpec::Kind::kBufferMutation || spec.kind == OutputSpec::Kind::kParameterMutation) {
      const int v = value_at(spec.arg.name);
      const size_t stage = v >= 0 && units.values[v].defined_at >= 0
                               ? stage_of_unit(ranges, units.values[v].defined_at)
                               : 0;
      const auto target = placeholder_of_target.find(spec.target);
      if (target != placeholder_of_target.end()) hold(stage, target->second);
    } else if (spec.kind == OutputSpec::Kind::kUserOutput || spec.kind == OutputSpec::Kind::kLossOutput) {
      for (const std::string& name : program.outputs[i].value_names()) hold(stages.size() - 1, name);
    }
  }
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    if (is_state(program.input_specs[i].kind) && !held[i]) holds[0][i] = true;
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    for (size_t i = 0; i < program.input_specs.size(); ++i) {
      if (holds[s][i] && is_state(program.input_specs[i].kind)) {
        stages[s].state.push_back(program.input_specs[i].target);
      }
    }
  }
  return stages;
}

namespace {

// A pytree spec as torch.utils._pytree.treespec_dumps writes it (protocol 1).
json leaf_spec() { return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}}; }
json tuple_spec(json children) {
  return {{"type", "builtins.tuple"}, {"context", "null"}, {"children_spec", std::move(children)}};
}
std::string flat_args_spec(size_t count) {
  json leaves = json::array();
  for (size_t i = 0; i < count; ++i) leaves.push_back(leaf_spec());
  const json kwargs = {{"type", "builtins.dict"}, {"context", "[]"}, {"children_spec", json::array()}};
  return json::array({1, tuple_spec(json::array({tuple_spec(leaves), kwargs}))}).dump();
}
std::string flat_tuple_spec(size_t count) {
  json leaves = json::array();
  for (size_t i = 0; i < count; ++i) leaves.push_back(leaf_spec());
  return json::array({1, tuple_spec(leaves)}).dump();
}

json value_argument(const std::string& name, const std::string& kind) {
  if (kind == "int") return {{"as_sym_int", {{"as_name", name}}}};
  return {{"as_tensor", {{"name", name}}}};
}

// The identifiers of every expr_str under `value` ("Symbol('s77', positive=True)", "2*s77"): the
// symbols its sizes are expressions of.
void collect_symbols(const json& value, std::unordered_set<std::string>& out) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it.key() == "expr_str" && it->is_string()) {
        const std::string& text = it->get_ref<const std::string&>();
        size_t i = 0;
        while (i < text.size()) {
          if (std::isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_') {
            const size_t start = i;
            while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
            out.insert(text.substr(start, i - start));
          } else {
            ++i;
          }
        }
      } else {
        collect_symbols(*it, out);
      }
    }
  } else if (value.is_array()) {
    for (const json& element : value) collect_symbols(element, out);
  }
}

json& member(const JsonReader& reader, json& object, const std::string& path, const std::string& key) {
  return const_cast<json&>(reader.member(object, path, key));
}

}  // namespace

std::string stage_model_json(const std::string& whole_model_json, const ExportedProgram& program,
                             const ProgramStage& stage, const std::string& origin) {
  const JsonReader reader(origin);
  json root = reader.parse_object(whole_model_json);
  const std::string gm_path = "graph_module";
  const std::string g_path = "graph_module.graph";
  const std::string s_path = "graph_module.signature";
  json& module = member(reader, root, "", "graph_module");
  reader.object(root, "", "graph_module");
  reader.object(module, gm_path, "graph");
  json& graph = member(reader, module, gm_path, "graph");
  reader.object(module, gm_path, "signature");
  json& signature = member(reader, module, gm_path, "signature");
  const json& nodes = reader.array(graph, g_path, "nodes");
  const json& inputs = reader.array(graph, g_path, "inputs");
  const json& outputs = reader.array(graph, g_path, "outputs");
  const json& input_specs = reader.array(signature, s_path, "input_specs");
  const json& output_specs = reader.array(signature, s_path, "output_specs");
  auto mismatch = [&](const std::string& what) {
    throw ConfigError(origin + ": " + what + " does not match the program it was read as");
  };
  if (nodes.size() != program.nodes.size()) mismatch(g_path + ".nodes");
  if (inputs.size() != program.inputs.size() || input_specs.size() != program.input_specs.size()) {
    mismatch(g_path + ".inputs");
  }
  if (outputs.size() != program.outputs.size() || output_specs.size() != program.output_specs.size()) {
    mismatch(g_path + ".outputs");
  }
  if (stage.end_unit > nodes.size() || stage.first_unit > stage.end_unit) {
    throw std::invalid_argument("stage_model_json: units [" + std::to_string(stage.first_unit) +
                                ", " + std::to_string(stage.end_unit) + ") of " +
                                std::to_string(nodes.size()));
  }
  const bool is_root = stage.first_unit == 0;

  // The values the stage names, and the state it holds.
  std::unordered_set<std::string> named;
  std::unordered_set<std::string> defined_here;
  for (size_t u = stage.first_unit; u < stage.end_unit; ++u) {
    for (const std::string& name : read_names(program.nodes[u])) named.insert(name);
    for (const std::string& name : defined_names(program.nodes[u])) {
      named.insert(name);
      defined_here.insert(name);
    }
  }
  const std::unordered_set<std::string> held_state(stage.state.begin(), stage.state.end());

  json new_inputs = json::array();
  json new_input_specs = json::array();
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    const InputSpec& spec = program.input_specs[i];
    const std::string name = placeholder_of(spec);
    const bool keep = is_state(spec.kind) ? held_state.count(spec.target) != 0
                      : spec.kind == InputSpec::Kind::kConstantInput ? named.count(name) != 0
                                                                     : false;
    if (!keep) continue;
    new_inputs.push_back(inputs[i]);
    new_input_specs.push_back(input_specs[i]);
    named.insert(name);
  }
  std::vector<size_t> user_inputs;
  for (size_t i = 0; i < program.input_specs.size(); ++i) {
    if (program.input_specs[i].kind == InputSpec::Kind::kUserInput) user_inputs.push_back(i);
  }
  std::unordered_map<std::string, size_t> user_input_of;
  for (size_t i : user_inputs) {
    const std::string name = placeholder_of(program.input_specs[i]);
    if (!name.empty()) user_input_of.emplace(name, i);
  }
  if (is_root) {
    for (size_t i : user_inputs) {
      new_inputs.push_back(inputs[i]);
      new_input_specs.push_back(input_specs[i]);
      named.insert(placeholder_of(program.input_specs[i]));
    }
  } else {
    for (size_t k = 0; k < stage.inputs.size(); ++k) {
      const std::string& name = stage.inputs[k];
      const auto user = user_input_of.find(name);
      const json arg = user != user_input_of.end()
                           ? inputs[user->second]
                           : value_argument(name, k < stage.input_types.size() ? stage.input_types[k] : "Tensor");
      new_inputs.push_back(arg);
      new_input_specs.push_back({{"user_input", {{"arg", arg}}}});
      named.insert(name);
    }
  }

  std::unordered_set<std::string> node_defined;
  for (const Node& node : program.nodes) {
    for (const std::string& name : defined_names(node)) node_defined.insert(name);
  }
  json new_outputs = json::array();
  json new_output_specs = json::array();
  for (size_t i = 0; i < program.output_specs.size(); ++i) {
    const OutputSpec& spec = program.output_specs[i];
    if (!is_mutation(spec.kind)) continue;
    // The stage whose node defines the value writes it back; a placeholder written back as it
    // is, the root.
    const bool here = defined_here.count(spec.arg.name) != 0 ||
                      (is_root && node_defined.count(spec.arg.name) == 0);
    if (!here) continue;
    new_outputs.push_back(outputs[i]);
    new_output_specs.push_back(output_specs[i]);
    named.insert(spec.arg.name);
  }
  if (stage.is_leaf) {
    for (size_t i = 0; i < program.output_specs.size(); ++i) {
      if (is_mutation(program.output_specs[i].kind)) continue;
      new_outputs.push_back(outputs[i]);
      new_output_specs.push_back(output_specs[i]);
      for (const std::string& name : program.outputs[i].value_names()) named.insert(name);
    }
  } else {
    for (size_t k = 0; k < stage.outputs.size(); ++k) {
      const json arg = value_argument(stage.outputs[k],
                                      k < stage.output_types.size() ? stage.output_types[k] : "Tensor");
      new_outputs.push_back(arg);
      new_output_specs.push_back({{"user_output", {{"arg", arg}}}});
      named.insert(stage.outputs[k]);
    }
  }

  json new_nodes = json::array();
  for (size_t u = stage.first_unit; u < stage.end_unit; ++u) {
    const std::string f = JsonReader::index(g_path + ".nodes", u);
    if (!nodes[u].is_object()) reader.fail(f, "must be an object, got " + JsonReader::kind(nodes[u]));
    if (reader.string(nodes[u], f, "target") != program.nodes[u].target) mismatch(f);
    new_nodes.push_back(nodes[u]);
  }
  graph["nodes"] = std::move(new_nodes);
  graph["inputs"] = std::move(new_inputs);
  graph["outputs"] = std::move(new_outputs);
  signature["input_specs"] = std::move(new_input_specs);
  signature["output_specs"] = std::move(new_output_specs);
  // A non-leaf returns a tuple of what it passes on, whatever the whole returned.
  if (!stage.is_leaf && graph.contains("is_single_tensor_return")) graph["is_single_tensor_return"] = false;
  for (const char* table : {"tensor_values", "sym_int_values", "sym_float_values", "sym_bool_values",
                            "custom_obj_values"}) {
    const auto it = graph.find(table);
    if (it == graph.end() || it->is_null()) continue;
    if (!it->is_object()) reader.fail(g_path + "." + table, "must be an object, got " + JsonReader::kind(*it));
    json kept = json::object();
    for (auto entry = it->begin(); entry != it->end(); ++entry) {
      if (named.count(entry.key())) kept[entry.key()] = entry.value();
    }
    *it = std::move(kept);
  }

  // Range constraints of the symbols the stage's values still name (torch.export.load warns of
  // the others).
  const auto constraints = root.find("range_constraints");
  if (constraints != root.end() && constraints->is_object()) {
    std::unordered_set<std::string> symbols;
    for (const char* table : {"tensor_values", "sym_int_values", "sym_float_values", "sym_bool_values"}) {
      const auto it = graph.find(table);
      if (it != graph.end()) collect_symbols(*it, symbols);
    }
    json kept = json::object();
    for (auto it = constraints->begin(); it != constraints->end(); ++it) {
      if (symbols.count(it.key())) kept[it.key()] = it.value();
    }
    *constraints = std::move(kept);
  }

  const auto call_graph = module.find("module_call_graph");
  if (call_graph != module.end() && call_graph->is_array()) {
    json kept = json::array();
    for (size_t i = 0; i < call_graph->size(); ++i) {
      json entry = (*call_graph)[i];
      const std::string f = JsonReader::index(gm_path + ".module_call_graph", i);
      if (!entry.is_object()) reader.fail(f, "must be an object, got " + JsonReader::kind(entry));
      const auto fqn = entry.find("fqn");
      const auto sig = entry.find("signature");
      const bool is_root_entry = fqn != entry.end() && fqn->is_string() && fqn->get<std::string>().empty();
      if (sig == entry.end() || sig->is_null()) {
        kept.push_back(std::move(entry));
        continue;
      }
      if (!is_root_entry && !(is_root && stage.is_leaf)) continue;
      if (!sig->is_object()) reader.fail(f + ".signature", "must be an object, got " + JsonReader::kind(*sig));
      if (!is_root) {
        (*sig)["in_spec"] = flat_args_spec(stage.inputs.size());
        (*sig)["forward_arg_names"] = stage.inputs;
        (*sig)["inputs"] = json::array();
      }
      if (!stage.is_leaf) {
        (*sig)["out_spec"] = flat_tuple_spec(stage.outputs.size());
        (*sig)["outputs"] = json::array();
      }
      kept.push_back(std::move(entry));
    }
    *call_graph = std::move(kept);
  }
  std::string text = root.dump();
  // What the stage's runtime will read must read: a whole that is not the program's (a value of
  // another kind where the program has one) shows here rather than on a daemon.
  parse_exported_program(text, origin + " (stage of units [" + std::to_string(stage.first_unit) +
                                   ", " + std::to_string(stage.end_unit) + "))");
  return text;
}

std::vector<InputBatch> user_input_batches(const std::string& whole_model_json,
                                           const ExportedProgram& program,
                                           const std::string& origin) {
  const JsonReader reader(origin);
  const json root = reader.parse_object(whole_model_json);
  const json& module = reader.object(root, "", "graph_module");
  const json& graph = reader.object(module, "graph_module", "graph");
  const std::string g_path = "graph_module.graph";
  const json& tensor_values = reader.object(graph, g_path, "tensor_values");
  std::vector<InputBatch> out;
  for (const InputSpec& spec : program.input_specs) {
    if (spec.kind != InputSpec::Kind::kUserInput) continue;
    if (spec.arg.kind != Kind::kTensor && spec.arg.kind != Kind::kOptionalTensor) continue;
    if (spec.arg.name.empty()) continue;
    InputBatch batch;
    batch.name = spec.arg.name;
    const std::string t_path = JsonReader::join(g_path + ".tensor_values", spec.arg.name);
    const auto meta = tensor_values.find(spec.arg.name);
    if (meta == tensor_values.end()) {
      reader.fail(g_path + ".tensor_values", "has no entry for user input '" + spec.arg.name + "'");
    }
    if (!meta->is_object()) reader.fail(t_path, "must be an object, got " + JsonReader::kind(*meta));
    const json& sizes = reader.array(*meta, t_path, "sizes");
    if (!sizes.empty()) {
      const std::string d_path = JsonReader::index(t_path + ".sizes", 0);
      const json& dim = sizes[0];
      if (!dim.is_object() || dim.size() != 1) reader.fail(d_path, "must hold exactly one member");
      const std::string key = dim.begin().key();
      const json& value = dim.begin().value();
      if (key == "as_int") {
        batch.size = reader.int64(value, d_path + ".as_int");
      } else if (key == "as_expr") {
        batch.dynamic = true;
        if (value.is_object()) {
          const auto hint = value.find("hint");
          if (hint != value.end() && hint->is_object()) {
            const auto number = hint->find("as_int");
            if (number != hint->end()) batch.size = reader.int64(*number, d_path + ".as_expr.hint.as_int");
          }
        }
      } else {
        reader.fail(d_path, "must be as_int or as_expr, got " + base::printable(key, 60));
      }
    }
    out.push_back(std::move(batch));
  }
  return out;
}

}  // namespace ravnest::exported
