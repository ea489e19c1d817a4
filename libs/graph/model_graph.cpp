#include "libs/graph/model_graph.h"

#include <algorithm>
#include <functional>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/torch_support/module_file.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

using torch::jit::Node;
using torch::jit::Value;

std::string join_path(const AttributePath& path) {
  std::string out;
  for (const auto& part : path) {
    if (!out.empty()) out += '.';
    out += part;
  }
  return out;
}

bool carriable_type(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::StringType:
      return true;
    case c10::TypeKind::OptionalType:
      return carriable_type(type->expectRef<c10::OptionalType>().getElementType());
    case c10::TypeKind::ListType: {
      auto element = type->expectRef<c10::ListType>().getElementType()->kind();
      return element == c10::TypeKind::IntType || element == c10::TypeKind::FloatType ||
             element == c10::TypeKind::BoolType;
    }
    default:
      return false;
  }
}

static bool contains_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const auto& contained : type->containedTypes()) {
    if (contains_tensor(contained)) return true;
  }
  return false;
}

std::unique_ptr<ModelGraph> ModelGraph::load(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw std::runtime_error(path + ": no such file");
  }
  std::unique_ptr<ModelGraph> model(new ModelGraph());
  model->path_ = path;
  model->module_ = torch_support::load_module(path);
  auto forward = model->module_.find_method("forward");
  if (!forward) throw std::runtime_error(path + ": the TorchScript model has no forward method");
  auto& function = torch::jit::toGraphFunction(forward->function());
  model->graph_ = function.graph()->copy();
  torch::jit::Inline(*model->graph_);
  torch::jit::EliminateDeadCode(model->graph_);

  const auto& arguments = function.getSchema().arguments();
  for (size_t i = 1; i < arguments.size(); ++i) {
    if (!arguments[i].default_value()) model->required_inputs_ = i;
  }
  for (size_t i = 1; i < model->graph_->inputs().size(); ++i) {
    model->model_inputs_.push_back(model->graph_->inputs()[i]);
  }
  model->analyse();
  return model;
}

std::vector<std::string> ModelGraph::input_names() const {
  std::vector<std::string> names;
  auto arguments = module_.get_method("forward").function().getSchema().arguments();
  for (size_t i = 1; i < arguments.size(); ++i) names.push_back(arguments[i].name());
  return names;
}

void ModelGraph::analyse() {
  index_attribute_paths(graph_->block());
  classify_nodes();
  compute_liveness();
  compute_cut_rules();
}

void ModelGraph::index_attribute_paths(torch::jit::Block* block) {
  for (Node* n : block->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      Value* object = n->input(0);
      const std::string& name = n->s(c10::attr::name);
      if (object == self_value()) {
        attribute_paths_[n->output()] = {name};
      } else if (auto it = attribute_paths_.find(object); it != attribute_paths_.end()) {
        AttributePath path = it->second;
        path.push_back(name);
        attribute_paths_[n->output()] = std::move(path);
      }
    }
    for (auto* sub : n->blocks()) index_attribute_paths(sub);
  }
}

void ModelGraph::classify_nodes() {
  auto value_is_free = [&](const Value* v) {
    if (v == self_value()) return true;
    auto it = free_.find(v->node());
    return v->node()->owningBlock() == graph_->block() && it != free_.end() && it->second;
  };
  for (Node* n : graph_->nodes()) {
    bool free = false;
    if (n->kind() == c10::prim::Constant || n->kind() == c10::prim::Uninitialized) {
      free = true;
    } else if (n->kind() == c10::prim::GetAttr) {
      free = value_is_free(n->input(0));
    } else if (n->blocks().empty() && !n->hasSideEffects() && !n->isNondeterministic()) {
      free = std::all_of(n->inputs().begin(), n->inputs().end(), value_is_free) &&
             std::none_of(n->outputs().begin(), n->outputs().end(),
                          [](const Value* v) { return contains_tensor(v->type()); });
    }
    free_[n] = free;
    if (!free) {
      unit_index_[n] = static_cast<int>(units_.size());
      units_.push_back(n);
    }
  }
}

bool ModelGraph::is_free(const Node* n) const {
  auto it = free_.find(n);
  return it != free_.end() && it->second;
}

Node* ModelGraph::top_level_node(Node* n) const {
  while (n->owningBlock() != graph_->block()) n = n->owningBlock()->owningNode();
  return n;
}

int ModelGraph::unit_of(const Node* top_level) const {
  auto it = unit_index_.find(top_level);
  return it == unit_index_.end() ? -1 : it->second;
}

const AttributePath* ModelGraph::attribute_path(const Value* v) const {
  auto it = attribute_paths_.find(v);
  return it == attribute_paths_.end() ? nullptr : &it->second;
}

bool ModelGraph::is_positioned(const Value* v) const { return defined_at_.count(v) != 0; }
int ModelGraph::defined_at(const Value* v) const { return defined_at_.at(v); }
int ModelGraph::last_used_at(const Value* v) const { return last_used_at_.at(v); }

bool ModelGraph::may_be_uninitialized(const Value* v) const {
  const Node* n = v->node();
  if (n->kind() == c10::prim::Uninitialized) return true;
  const size_t i = v->offset();
  if (n->kind() == c10::prim::If) {
    for (const auto* block : n->blocks()) {
      if (may_be_uninitialized(block->outputs()[i])) return true;
    }
  } else if (n->kind() == c10::prim::Loop) {
    // Outputs are the loop-carried values: initial inputs after (trip count, condition), and
    // block outputs after the continue condition.
    if (may_be_uninitialized(n->inputs()[2 + i])) return true;
    if (may_be_uninitialized(n->blocks()[0]->outputs()[1 + i])) return true;
  }
  return false;
}

int ModelGraph::unit_using(Node* user) const {
  Node* top = top_level_node(user);
  return top == graph_->return_node() ? static_cast<int>(units_.size()) : unit_of(top);
}

void ModelGraph::compute_liveness() {
  auto add = [&](Value* v, int at) {
    int last = at;
    for (const auto& use : v->uses()) last = std::max(last, unit_using(use.user));
    positioned_.push_back(v);
    defined_at_[v] = at;
    last_used_at_[v] = last;
  };
  for (Value* v : model_inputs_) add(v, -1);
  for (size_t u = 0; u < units_.size(); ++u) {
    for (Value* v : units_[u]->outputs()) add(v, static_cast<int>(u));
  }
}

void ModelGraph::compute_cut_rules() {
  const int n = static_cast<int>(units_.size());
  cut_allowed_.assign(n > 0 ? n - 1 : 0, true);
  auto forbid = [&](int from, int to) {  // boundaries [from, to)
    for (int i = std::max(from, 0); i < std::min(to, n - 1); ++i) cut_allowed_[i] = false;
  };

  torch::jit::AliasDb alias_db(graph_);
  // The last unit that reads `w` or what an If or a Loop passes it on as unchanged (its block
  // returns `w`): torchvision's stochastic depth returns its input when it does not drop, and
  // ConvNeXt then adds into that result in place.
  std::function<int(Value*)> reach = [&](Value* w) {
    int furthest = -1;
    for (const auto& use : w->uses()) {
      furthest = std::max(furthest, unit_using(use.user));
      if (use.user->kind() != c10::prim::Return) continue;
      Node* owner = use.user->owningBlock()->owningNode();
      if (owner == nullptr) continue;
      if (owner->kind() == c10::prim::If) {
        furthest = std::max(furthest, reach(owner->outputs()[use.offset]));
      } else if (owner->kind() == c10::prim::Loop && use.offset >= 1) {
        furthest = std::max(furthest, reach(owner->outputs()[use.offset - 1]));
      }
    }
    return furthest;
  };
  for (Value* v : positioned_) {
    const int def = defined_at_.at(v);
    const int last = last_used_at_.at(v);
    if (last <= def) continue;
    if (!carriable_type(v->type())) {
      forbid(def, last);
      continue;
    }
    // A later unit that writes to v (or an alias of it) would write to its own copy, or to a
    // received leaf.
    if (v->type()->kind() != c10::TypeKind::TensorType) continue;
    for (int j = std::min(std::max(last, reach(v)), n - 1); j > def; --j) {
      if (alias_db.writesToAlias(units_[j], {v})) {
        forbid(def, j);
        break;
      }
    }
  }

  // An object the forward makes (prim::CreateObject) stays in one stage with everything that uses
  // it: `with torch.no_grad():` is such an object, its attribute set, then prim::Enter ...
  // prim::Exit around the body in the same block, so a cut inside would leave one stage in a
  // context it never leaves (and the other writing an empty `with`).
  for (Node* node : graph_->nodes()) {
    if (node->kind() != c10::prim::CreateObject) continue;
    int lo = n, hi = -1;
    for (Value* out : node->outputs()) {
      for (const auto& use : out->uses()) {
        const int unit = unit_using(use.user);
        if (unit < 0) continue;
        lo = std::min(lo, unit);
        hi = std::max(hi, unit);
      }
    }
    if (hi > lo) forbid(lo, hi);
  }

  // Attributes that the forward mutates (SetAttr, or an in-place write to a parameter or
  // buffer) must be read and written in one stage.
  std::unordered_map<std::string, std::vector<int>> accessors;
  std::unordered_map<std::string, bool> mutated;
  std::function<void(torch::jit::Block*)> scan = [&](torch::jit::Block* block) {
    for (Node* node : block->nodes()) {
      const int unit = unit_of(top_level_node(node));
      if (node->kind() == c10::prim::GetAttr || node->kind() == c10::prim::SetAttr) {
        const AttributePath* object_path = attribute_path(node->input(0));
        AttributePath path = object_path ? *object_path : AttributePath{};
        if (node->input(0) == self_value() || object_path) {
          path.push_back(node->s(c10::attr::name));
          const std::string key = join_path(path);
          if (node->kind() == c10::prim::SetAttr) {
            mutated[key] = true;
            accessors[key].push_back(unit);
          } else {
            for (const auto& use : node->output()->uses()) {
              const int user_unit = unit_of(top_level_node(use.user));
              if (user_unit < 0) continue;
              accessors[key].push_back(user_unit);
              if (node->output()->type()->kind() == c10::TypeKind::TensorType &&
                  alias_db.writesToAlias(use.user, {node->output()})) {
                mutated[key] = true;
              }
            }
          }
        }
      }
      for (auto* sub : node->blocks()) scan(sub);
    }
  };
  scan(graph_->block());
  for (const auto& [key, units] : accessors) {
    if (!mutated[key]) continue;
    std::vector<int> valid;
    for (int u : units) if (u >= 0) valid.push_back(u);
    if (valid.empty()) continue;
    auto [lo, hi] = std::minmax_element(valid.begin(), valid.end());
    forbid(*lo, *hi);
  }
}

std::string ModelGraph::unit_label(size_t unit) const {
  Node* n = units_.at(unit);
  std::string label = n->kind().toQualString();
  for (Value* input : n->inputs()) {
    const AttributePath* path = attribute_path(input);
    if (path && input->type()->kind() == c10::TypeKind::TensorType && path->size() > 1) {
      AttributePath owner(path->begin(), path->end() - 1);
      return label + " " + join_path(owner);
    }
  }
  return label;
}

}  // namespace ravnest::graph
