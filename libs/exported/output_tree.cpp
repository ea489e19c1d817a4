#include "libs/exported/output_tree.h"

#include <nlohmann/json.hpp>

#include "libs/base/config_error.h"

namespace ravnest::exported {

namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& origin, const std::string& what) {
  throw base::ConfigError(origin + ": the outputs' out_spec " + what);
}

OutputTree read_spec(const json& spec, const std::string& origin, int depth) {
  if (depth > 64) refuse(origin, "nests deeper than 64");
  if (!spec.is_object()) refuse(origin, "holds a node that is not an object");
  OutputTree tree;
  const auto type = spec.find("type");
  if (type == spec.end() || type->is_null()) return tree;  // a leaf
  if (!type->is_string()) refuse(origin, "has a type that is not a string");
  const std::string name = type->get<std::string>();
  const auto children = spec.find("children_spec");
  if (children == spec.end() || !children->is_array()) refuse(origin, "has no children_spec list");
  for (const auto& child : *children) tree.children.push_back(read_spec(child, origin, depth + 1));
  if (name == "builtins.list") {
    tree.kind = OutputTree::Kind::kList;
  } else if (name == "builtins.dict" || name == "collections.OrderedDict" ||
             name == "collections.defaultdict") {
    tree.kind = OutputTree::Kind::kDict;
    const auto context = spec.find("context");
    json keys;
    try {
      keys = context != spec.end() && context->is_string() ? json::parse(context->get<std::string>())
                                                           : json();
    } catch (const json::exception&) {
      refuse(origin, "has a dict whose keys are not JSON");
    }
    // defaultdict's context is {"default_factory_module", ..., "dict_context": [...]}.
    if (keys.is_object() && keys.contains("dict_context")) keys = keys["dict_context"];
    if (!keys.is_array() || keys.size() != tree.children.size()) {
      refuse(origin, "has a dict whose keys do not match its children");
    }
    for (const auto& key : keys) tree.keys.push_back(key.is_string() ? key.get<std::string>() : key.dump());
  } else {
    tree.kind = OutputTree::Kind::kTuple;  // builtins.tuple, namedtuples, dataclasses
  }
  return tree;
}

}  // namespace

size_t OutputTree::leaves() const {
  if (kind == Kind::kLeaf) return 1;
  size_t total = 0;
  for (const auto& child : children) total += child.leaves();
  return total;
}

OutputTree root_output_tree(const std::string& model_json, size_t outputs,
                            const std::string& origin) {
  OutputTree flat;  // without a spec: the one output itself, or a tuple of several
  if (outputs != 1) {
    flat.kind = OutputTree::Kind::kTuple;
    flat.children.resize(outputs);
  }
  json whole;
  try {
    whole = json::parse(model_json);
  } catch (const json::exception&) {
    throw base::ConfigError(origin + ": models/*.json is not JSON");
  }
  const json* graph = whole.is_object() && whole.contains("graph_module") ? &whole["graph_module"]
                                                                         : nullptr;
  if (!graph || !graph->is_object() || !graph->contains("module_call_graph")) return flat;
  const json& calls = (*graph)["module_call_graph"];
  if (!calls.is_array() || calls.empty() || !calls[0].is_object()) return flat;
  const json& root = calls[0];
  if (!root.contains("signature") || !root["signature"].is_object() ||
      !root["signature"].contains("out_spec") || !root["signature"]["out_spec"].is_string()) {
    return flat;
  }
  json spec;
  try {
    spec = json::parse(root["signature"]["out_spec"].get<std::string>());
  } catch (const json::exception&) {
    refuse(origin, "is not JSON");
  }
  if (!spec.is_array() || spec.size() != 2) refuse(origin, "is not [protocol, spec]");
  OutputTree tree = read_spec(spec[1], origin, 0);
  if (tree.leaves() != outputs) {
    refuse(origin, "takes " + std::to_string(tree.leaves()) + " outputs; the program returns " +
                       std::to_string(outputs));
  }
  return tree;
}

}  // namespace ravnest::exported
