#include "libs/graph/sparse_tables.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

namespace ravnest::graph {

using torch::jit::Node;
using torch::jit::Value;

namespace {

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw std::invalid_argument("--on-server " + name + ": " + why);
}

bool is_shape_query(const Node* n) {
  static const std::set<std::string> kinds = {
      "aten::size", "aten::dim", "aten::numel", "aten::len", "prim::dtype", "prim::device",
      "prim::layout", "aten::is_floating_point", "aten::__is__", "aten::__isnot__",
      "prim::isinstance", "prim::is_cuda", "aten::is_nonzero"};
  return kinds.count(n->kind().toQualString()) != 0;
}

// Ops whose first input's elements reappear, unchanged, in their output.
bool moves_elements(const Node* n) {
  static const std::set<std::string> kinds = {
      "aten::reshape", "aten::view", "aten::flatten", "aten::contiguous", "aten::squeeze",
      "aten::unsqueeze", "aten::t", "aten::transpose", "aten::permute", "aten::select",
      "aten::slice", "aten::to", "aten::clone", "aten::detach", "aten::expand",
      "prim::unchecked_cast", "aten::reshape_as", "aten::view_as"};
  return kinds.count(n->kind().toQualString()) != 0;
}

bool is_lookup(const Node* n) {
  const std::string kind = n->kind().toQualString();
  return kind == "aten::embedding" || kind == "aten::embedding_bag" ||
         kind == "aten::_embedding_bag";
}

// A value returned by a prim::If branch continues as the If's output.
Value* through_branch(const torch::jit::Use& use) {
  if (use.user->kind() != c10::prim::Return) return nullptr;
  Node* owner = use.user->owningBlock()->owningNode();
  if (owner == nullptr || owner->kind() != c10::prim::If) return nullptr;
  return owner->output(use.offset);
}

std::string op_name(const Node* n) {
  if (n->kind() == c10::prim::Return) return "a loop or the model's output";
  return n->kind().toQualString();
}

struct Flow {
  std::unordered_set<const Value*> values;
  std::vector<std::pair<Node*, size_t>> lookups;  // (node, argument)
  std::vector<std::pair<Node*, size_t>> moved_lookups;  // reached through an element move
  std::vector<const Node*> other_uses;
};

// Where `start` flows through branches and element moves.
Flow follow(const std::vector<Value*>& start) {
  Flow flow;
  std::deque<std::pair<Value*, bool>> pending;
  for (Value* v : start) pending.emplace_back(v, false);
  std::unordered_set<const Value*> moved;
  while (!pending.empty()) {
    auto [v, was_moved] = pending.front();
    pending.pop_front();
    if (was_moved) moved.insert(v);
    if (!flow.values.insert(v).second) continue;
    for (const auto& use : v->uses()) {
      if (Value* out = through_branch(use)) {
        pending.emplace_back(out, was_moved);
      } else if (is_shape_query(use.user)) {
      } else if (is_lookup(use.user) && use.offset <= 1) {
        (was_moved ? flow.moved_lookups : flow.lookups).emplace_back(use.user, use.offset);
      } else if (moves_elements(use.user) && use.offset == 0) {
        pending.emplace_back(use.user->output(0), true);
      } else {
        flow.other_uses.push_back(use.user);
      }
    }
  }
  return flow;
}

void collect_reads(torch::jit::Block* block, const ModelGraph& model, const AttributePath& path,
                   std::vector<Value*>& reads, std::vector<Value*>& object_reads) {
  for (Node* n : block->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      if (const AttributePath* p = model.attribute_path(n->output())) {
        if (*p == path) reads.push_back(n->output());
        if (p->size() + 1 == path.size() && std::equal(p->begin(), p->end(), path.begin())) {
          object_reads.push_back(n->output());
        }
      }
    }
    for (auto* sub : n->blocks()) collect_reads(sub, model, path, reads, object_reads);
  }
}

}  // namespace

std::vector<SparseTableUse> find_sparse_tables(ModelGraph& model,
                                               const std::vector<std::string>& submodules) {
  std::vector<SparseTableUse> out;
  std::map<int, std::string> input_owner;  // model input -> the table it indexes
  for (const auto& name : submodules) {
    if (name.empty()) refuse(name, "names no submodule");
    // The submodule, by its dotted path.
    AttributePath path;
    torch::jit::Module module = model.module();
    for (size_t start = 0;;) {
      const size_t dot = name.find('.', start);
      const std::string part = name.substr(start, dot == std::string::npos ? dot : dot - start);
      if (!module.hasattr(part) || !module.attr(part).isModule()) {
        refuse(name, "the model has no submodule " + name);
      }
      module = module.attr(part).toModule();
      path.push_back(part);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    const std::string type = module.type()->name() ? module.type()->name()->name() : "?";
    if (type != "Embedding" && type != "EmbeddingBag") {
      refuse(name, "is a " + type + ", not an nn.Embedding or nn.EmbeddingBag");
    }
    if (!module.hasattr("weight") || !module.attr("weight").isTensor()) {
      refuse(name, "has no weight tensor");
    }
    if (module.hasattr("padding_idx") && module.attr("padding_idx").isInt() &&
        module.attr("padding_idx").toInt() >= 0) {
      refuse(name, "has a padding_idx, which a server's table does not support yet");
    }
    if (module.hasattr("max_norm") && !module.attr("max_norm").isNone()) {
      refuse(name, "has max_norm, which rescales the table in place; a server's table cannot");
    }
    for (const auto& sub : module.named_children()) {
      refuse(name, "has a submodule of its own (" + sub.name + ")");
    }
    path.push_back("weight");
    // A tied weight is also read under its other name, densely as far as the table knows.
    const at::Tensor table_weight = module.attr("weight").toTensor();
    for (const auto& p : model.module().named_parameters()) {
      if (p.value.unsafeGetTensorImpl() == table_weight.unsafeGetTensorImpl() &&
          p.name != join_path(path)) {
        refuse(name, "its weight is tied to " + p.name + "; only lookups can run on a server");
      }
    }

    std::vector<Value*> reads, object_reads;
    collect_reads(model.graph()->block(), model, path, reads, object_reads);
    for (Value* object : object_reads) {
      for (const auto& use : object->uses()) {
        if (use.user->kind() != c10::prim::GetAttr) {
          refuse(name, "is used as an object by " + op_name(use.user) +
                           "; only its lookups can run on a server");
        }
      }
    }
    Flow weight = follow(reads);
    // A moved table may reach a lookup only as its indices: F.embedding_bag's check for the
    // deprecated argument order routes the weight there on a branch that never runs.
    for (const auto& [node, arg] : weight.moved_lookups) {
      if (arg == 0) refuse(name, "its weight is reshaped or sliced before a lookup");
    }
    if (!weight.other_uses.empty()) {
      refuse(name, "its weight is used densely by " + op_name(weight.other_uses.front()) +
                       "; only lookups can run on a server");
    }
    if (weight.lookups.empty()) refuse(name, "is never looked up in forward");

    // The model input whose elements are the lookups' indices.
    std::set<int> feeding;
    for (size_t k = 0; k < model.model_inputs().size(); ++k) {
      Flow input = follow({model.model_inputs()[k]});
      input.lookups.insert(input.lookups.end(), input.moved_lookups.begin(),
                           input.moved_lookups.end());
      bool feeds = false;
      for (const auto& [node, arg] : weight.lookups) {
        for (size_t a : {size_t{0}, size_t{1}}) {
          if (input.values.count(node->input(a))) feeds = true;
        }
      }
      if (!feeds) continue;
      if (!input.other_uses.empty()) {
        refuse(name, "its indices (the model's input " +
                         model.input_names().at(k) + ") are also used by " +
                         op_name(input.other_uses.front()) +
                         "; a trainer replaces them by row positions");
      }
      for (const auto& [node, arg] : input.lookups) {
        const bool ours = std::any_of(weight.lookups.begin(), weight.lookups.end(),
                                      [&](const auto& l) { return l.first == node; });
        if (!ours) refuse(name, "its indices also index another table");
      }
      feeding.insert(static_cast<int>(k));
    }
    if (feeding.empty()) {
      refuse(name, "its indices are computed inside the model; a server's table needs them "
                   "straight from a model input");
    }
    if (feeding.size() > 1) refuse(name, "its lookups take indices from several model inputs");
    const int input = *feeding.begin();
    if (auto other = input_owner.find(input); other != input_owner.end()) {
      refuse(name, "shares its indices with " + other->second);
    }
    input_owner[input] = name;

    SparseTableUse table;
    table.submodule = name;
    table.weight = join_path(path);
    table.index_input = input;
    const at::Tensor w = module.attr("weight").toTensor();
    table.shape = w.sizes().vec();
    table.bytes = static_cast<int64_t>(w.numel()) * static_cast<int64_t>(w.element_size());
    out.push_back(std::move(table));
  }
  return out;
}

}  // namespace ravnest::graph
