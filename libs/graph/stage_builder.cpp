#include "libs/graph/stage_builder.h"

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/passes/constant_propagation.h>

namespace ravnest::graph {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

namespace {

int stage_of_unit(const std::vector<std::pair<size_t, size_t>>& ranges, int unit) {
  for (size_t s = 0; s < ranges.size(); ++s) {
    if (unit >= static_cast<int>(ranges[s].first) && unit < static_cast<int>(ranges[s].second)) {
      return static_cast<int>(s);
    }
  }
  return static_cast<int>(ranges.size()) - 1;  // the return node belongs to the leaf
}

bool in_stage(const ModelGraph& model, const StageWiring& wiring, Node* top_level) {
  const int unit = model.unit_of(top_level);
  return unit >= static_cast<int>(wiring.first_unit) && unit < static_cast<int>(wiring.end_unit);
}

// Visits every value read by the nodes of `block` (and its sub-blocks), and every node.
void walk(Block* block, const std::function<void(Node*)>& on_node,
          const std::function<void(Value*, Node*)>& on_use) {
  for (Node* n : block->nodes()) {
    on_node(n);
    for (Value* v : n->inputs()) on_use(v, n);
    for (Block* sub : n->blocks()) walk(sub, on_node, on_use);
  }
  for (Value* v : block->outputs()) on_use(v, block->return_node());
}

void walk_node(Node* n, const std::function<void(Node*)>& on_node,
               const std::function<void(Value*, Node*)>& on_use) {
  on_node(n);
  for (Value* v : n->inputs()) on_use(v, n);
  for (Block* sub : n->blocks()) walk(sub, on_node, on_use);
}

// The nodes a stage executes: its units and the free nodes they need, in graph order.
std::vector<Node*> stage_nodes(const ModelGraph& model, const StageWiring& wiring) {
  std::unordered_set<Node*> needed;
  std::vector<Value*> pending;
  auto need_value = [&](Value* v, Node*) {
    Node* producer = v->node();
    if (producer->owningBlock() == model.graph()->block() && model.is_free(producer)) {
      pending.push_back(v);
    }
  };
  auto ignore = [](Node*) {};
  for (size_t u = wiring.first_unit; u < wiring.end_unit; ++u) {
    walk_node(model.units()[u], ignore, need_value);
  }
  if (wiring.is_leaf) {
    for (Value* v : model.graph()->outputs()) need_value(v, nullptr);
  }
  while (!pending.empty()) {
    Node* producer = pending.back()->node();
    pending.pop_back();
    if (!needed.insert(producer).second) continue;
    for (Value* v : producer->inputs()) need_value(v, nullptr);
  }
  std::vector<Node*> nodes;
  for (Node* n : model.graph()->nodes()) {
    if (needed.count(n) || in_stage(model, wiring, n)) nodes.push_back(n);
  }
  return nodes;
}

bool is_module_type(const c10::TypePtr& type) {
  auto cls = type->cast<c10::ClassType>();
  return cls && cls->is_module();
}

}  // namespace

std::vector<StageWiring> wire_stages(const ModelGraph& model,
                                     const std::vector<std::pair<size_t, size_t>>& ranges) {
  if (ranges.empty()) throw std::invalid_argument("wire_stages: no stages");
  std::vector<StageWiring> stages(ranges.size());
  for (size_t s = 0; s < ranges.size(); ++s) {
    stages[s].first_unit = ranges[s].first;
    stages[s].end_unit = ranges[s].second;
    stages[s].is_leaf = s + 1 == ranges.size();
  }
  auto& root = stages.front();
  for (size_t k = 0; k < model.model_inputs().size(); ++k) {
    root.inputs.push_back(model.model_inputs()[k]);
    root.input_sources.push_back({static_cast<int>(k), -1, -1});
  }

  // Producer and consumers of every positioned value; outputs are numbered in definition order.
  std::unordered_map<const Value*, std::pair<int, int>> produced_as;  // stage, output index
  for (Value* v : model.positioned_values()) {
    const int producer = model.defined_at(v) < 0 ? 0 : stage_of_unit(ranges, model.defined_at(v));
    std::set<int> consumers;
    for (const auto& use : v->uses()) {
      Node* top = model.top_level_node(use.user);
      const int unit = top == model.graph()->return_node() ? -1 : model.unit_of(top);
      consumers.insert(unit < 0 ? static_cast<int>(ranges.size()) - 1
                                : stage_of_unit(ranges, unit));
    }
    consumers.erase(producer);
    if (consumers.empty()) continue;
    auto& owner = stages[producer];
    produced_as[v] = {producer, static_cast<int>(owner.outputs.size())};
    owner.outputs.push_back(v);
    owner.output_consumers.emplace_back(consumers.begin(), consumers.end());
  }
  for (Value* v : model.positioned_values()) {
    auto it = produced_as.find(v);
    if (it == produced_as.end()) continue;
    const auto [producer, output] = it->second;
    for (int consumer : stages[producer].output_consumers[output]) {
      stages[consumer].inputs.push_back(v);
      stages[consumer].input_sources.push_back({-1, producer, output});
    }
  }
  for (const auto& stage : stages) {
    if (stage.is_leaf && !stage.outputs.empty()) {
      throw std::logic_error("wire_stages: the leaf has outputs");
    }
  }
  return stages;
}

static AttributePath split_name(const std::string& name);

static void collect_tensors(const c10::IValue& value,
                            std::unordered_set<const c10::TensorImpl*>& out) {
  if (value.isTensor()) {
    if (value.toTensor().defined()) out.insert(value.toTensor().unsafeGetTensorImpl());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) {
      if (t.defined()) out.insert(t.unsafeGetTensorImpl());
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toList()) collect_tensors(element, out);
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) collect_tensors(element, out);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) collect_tensors(entry.value(), out);
  }
}

// A stage that reads tensors through a container attribute (nn.LSTM and nn.GRU compute from
// `_flat_weights`, a list of their parameters) holds those parameters too: else they would be
// nobody's to train (the stage's list a plain attribute, the parameters left over for the root).
static void add_aliased_state(const ModelGraph& model, std::set<AttributePath>& paths) {
  auto& module = const_cast<ModelGraph&>(model).module();
  std::unordered_set<const c10::TensorImpl*> held;
  for (const auto& path : paths) {
    c10::IValue value = module._ivalue();
    bool found = true;
    for (const auto& name : path) {
      if (!value.isObject() || !value.toObject()->type()->hasAttribute(name)) {
        found = false;
        break;
      }
      value = value.toObject()->getAttr(name);
    }
    if (found && !value.isTensor() && !value.isObject()) collect_tensors(value, held);
  }
  if (held.empty()) return;
  for (const auto& [name, tensor] : named_state(module)) {
    if (held.count(tensor.unsafeGetTensorImpl())) paths.insert(split_name(name));
  }
}

std::set<AttributePath> stage_attribute_paths(const ModelGraph& model, const StageWiring& wiring) {
  std::set<AttributePath> paths;
  auto on_node = [&](Node* n) {
    if (n->kind() == c10::prim::SetAttr) {
      const AttributePath* object = model.attribute_path(n->input(0));
      AttributePath path = object ? *object : AttributePath{};
      if (object || n->input(0) == model.self_value()) {
        path.push_back(n->s(c10::attr::name));
        paths.insert(path);
      }
    }
  };
  // An attribute value read by anything but another attribute read is a leaf of the tree.
  auto on_use = [&](Value* v, Node* user) {
    const AttributePath* path = model.attribute_path(v);
    if (path && user->kind() != c10::prim::GetAttr) paths.insert(*path);
  };
  for (Node* n : stage_nodes(model, wiring)) walk_node(n, on_node, on_use);
  if (wiring.is_leaf) {
    for (Value* v : model.graph()->outputs()) on_use(v, model.graph()->return_node());
  }
  add_aliased_state(model, paths);
  return paths;
}

static bool covered(const AttributePath& name, const std::set<AttributePath>& used) {
  for (size_t len = 1; len <= name.size(); ++len) {
    if (used.count(AttributePath(name.begin(), name.begin() + len))) return true;
  }
  return false;
}

static AttributePath split_name(const std::string& name) {
  AttributePath path;
  for (size_t start = 0;;) {
    size_t dot = name.find('.', start);
    path.push_back(name.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return path;
}

std::vector<AttributePath> uncovered_state(const ModelGraph& model,
                                           const std::set<AttributePath>& used) {
  std::vector<AttributePath> out;
  for (const auto& name : state_names(const_cast<ModelGraph&>(model).module())) {
    AttributePath path = split_name(name);
    if (!covered(path, used)) out.push_back(path);
  }
  return out;
}

// Python's order: each module's parameters, then its buffers, then its children, recursively.
static void collect_named_state(const c10::intrusive_ptr<c10::ivalue::Object>& object,
                                const std::string& prefix,
                                std::vector<std::pair<std::string, at::Tensor>>& out) {
  const auto& type = object->type();
  const size_t count = type->numAttributes();
  for (bool buffers : {false, true}) {
    for (size_t slot = 0; slot < count; ++slot) {
      if ((buffers ? type->is_buffer(slot) : type->is_parameter(slot)) &&
          object->getSlot(slot).isTensor()) {
        out.emplace_back(prefix + type->getAttributeName(slot), object->getSlot(slot).toTensor());
      }
    }
  }
  for (size_t slot = 0; slot < count; ++slot) {
    if (is_module_type(type->getAttribute(slot))) {
      collect_named_state(object->getSlot(slot).toObject(),
                          prefix + type->getAttributeName(slot) + ".", out);
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> named_state(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  collect_named_state(module._ivalue(), "", out);
  return out;
}

std::vector<std::string> state_names(const torch::jit::Module& module) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named_state(module)) names.push_back(name);
  return names;
}

namespace {

// Builds the pruned module tree of one stage.
class PrunedTree {
 public:
  PrunedTree(const torch::jit::Module& original, std::string type_prefix)
      : cu_(std::make_shared<torch::jit::CompilationUnit>()),
        original_(original),
        prefix_(std::move(type_prefix)) {
    root_ = make_module(original_._ivalue(), "Stage");
  }

  torch::jit::Module& root() { return root_; }
  const std::shared_ptr<torch::jit::CompilationUnit>& cu() const { return cu_; }

  void add(const AttributePath& path) {
    c10::intrusive_ptr<c10::ivalue::Object> owner = original_._ivalue();
    torch::jit::Module target = root_;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      c10::IValue child = owner->getAttr(path[i]);
      if (!child.isObject()) {
        throw std::logic_error("attribute path " + join_path(path) + " runs through a non-object");
      }
      owner = child.toObject();
      target = child_module(target, path[i], owner);
    }
    const std::string& name = path.back();
    if (target.type()->hasAttribute(name)) return;
    const auto& owner_type = owner->type();
    const size_t slot = owner_type->getAttributeSlot(name);
    const c10::TypePtr& type = owner_type->getAttribute(slot);
    c10::IValue value = owner->getSlot(slot);
    if (is_module_type(type)) {
      target.register_module(name, torch::jit::Module(value.toObject()).deepcopy());
      return;
    }
    value = copy_value(value);
    target.register_attribute(name, type, value, owner_type->is_parameter(slot),
                              owner_type->is_buffer(slot));
  }

 private:
  torch::jit::Module make_module(const c10::intrusive_ptr<c10::ivalue::Object>& original,
                                 const std::string& fallback_name) {
    std::string base = fallback_name;
    if (auto name = original->type()->name()) base = name->name();
    auto type = c10::ClassType::create(
        c10::QualifiedName(prefix_ + "." + base + "_" + std::to_string(counter_++)), cu_,
        /*is_module=*/true);
    torch::jit::Module module(cu_, type);
    if (original->type()->hasAttribute("training")) {
      module.register_attribute("training", c10::BoolType::get(), original->getAttr("training"));
    }
    return module;
  }

  torch::jit::Module child_module(torch::jit::Module& parent, const std::string& name,
                                  const c10::intrusive_ptr<c10::ivalue::Object>& original) {
    if (parent.type()->hasAttribute(name)) {
      return torch::jit::Module(parent._ivalue()->getAttr(name).toObject());
    }
    torch::jit::Module child = make_module(original, name);
    parent.register_module(name, child);
    return child;
  }

  // Tensors inside lists, tuples and dicts are copied through copy_tensor too, so that the stage
  // keeps the model's aliasing: nn.LSTM and nn.GRU compute from `_flat_weights`, a list holding
  // the very tensors registered as their parameters. Were the list's tensors not the parameters'
  // copies, the optimizer would step the parameters while forward read stale weights.
  c10::IValue copy_value(const c10::IValue& value) {
    if (value.isTensor()) return copy_tensor(value.toTensor());
    if (value.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : value.toTensorList()) out.push_back(copy_tensor(t));
      return out;
    }
    if (value.isList()) {
      auto in = value.toList();
      c10::impl::GenericList out(in.elementType());
      for (const c10::IValue& element : in) out.push_back(copy_value(element));
      return out;
    }
    if (value.isTuple()) {
      std::vector<c10::IValue> elements;
      for (const c10::IValue& element : value.toTupleRef().elements()) {
        elements.push_back(copy_value(element));
      }
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    if (value.isGenericDict()) {
      auto in = value.toGenericDict();
      c10::impl::GenericDict out(in.keyType(), in.valueType());
      for (const auto& entry : in) out.insert(entry.key(), copy_value(entry.value()));
      return out;
    }
    return value;
  }

  at::Tensor copy_tensor(const at::Tensor& t) {
    if (!t.defined()) return t;
    auto it = copies_.find(t.unsafeGetTensorImpl());
    if (it != copies_.end()) return it->second;
    at::Tensor copy = t.detach().clone();
    copy.set_requires_grad(t.requires_grad());
    copies_[t.unsafeGetTensorImpl()] = copy;
    return copy;
  }

  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  torch::jit::Module original_;
  std::string prefix_;
  torch::jit::Module root_;
  int counter_ = 0;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> copies_;
};

std::string identifier(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v_" + out;
  return out;
}

// Attribute reads take the types of the pruned tree.
void retype_attribute_reads(Block* block) {
  for (Node* n : block->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      auto cls = n->input(0)->type()->cast<c10::ClassType>();
      const std::string& name = n->s(c10::attr::name);
      if (!cls || !cls->hasAttribute(name)) {
        throw std::logic_error("stage reads attribute '" + name + "' missing from its tree");
      }
      n->output()->setType(cls->getAttribute(name));
    }
    for (Block* sub : n->blocks()) retype_attribute_reads(sub);
  }
}

// Moves every top-level prim::If and prim::Loop of a stage's forward into a function of its own,
// which torch saves in a code file of its own (one file per qualifier), and calls it in its place.
//
// Why: torch::jit::load compiles the saved code, and for every variable assigned in only one
// branch of an `if` the compiler keeps an error to raise should the variable be read afterwards
// (emitIfElseBlocks). Each kept error holds a copy of the source text of the whole file (the
// OwnedSourceRange of ErrorReport, line table included) until the function is compiled. A
// stage's forward is the model's forward inlined: one function in one file, whose length and
// number of such variables both grow with the stage, so its load cost grew with their product.
// A 4-block GPT stage kept ~1,900 copies of its 141 KB file: 320 MB of heap, which glibc then
// kept; 8 blocks, 1.3 GB. Here each branching statement costs copies of its own code only, and
// the forward, left without branches, none: the two stages load in 38 and 52 MB, parameters
// included.
//
// Nothing computed changes: before a graph runs or is differentiated, the executor inlines every
// call (GraphFunction::optimized_graph), which gives back the very nodes taken out here. A part
// takes the values its statement reads (tensors, lists and objects as references, the same ones;
// constants are copied in) and returns the statement's outputs.
class Outliner {
 public:
  Outliner(std::shared_ptr<torch::jit::CompilationUnit> cu, std::string prefix)
      : cu_(std::move(cu)), prefix_(std::move(prefix)) {}

  void outline(Block* block) {
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      Node* n = *it++;  // n is replaced
      if (n->kind() == c10::prim::If || n->kind() == c10::prim::Loop) outline(n);
    }
  }

 private:
  // Whether `v` is defined in one of `n`'s blocks, at any depth.
  static bool defined_in(Node* n, Value* v) {
    for (Block* b = v->node()->owningBlock(); b->owningNode() != nullptr;
         b = b->owningNode()->owningBlock()) {
      if (b->owningNode() == n) return true;
    }
    return false;
  }

  void outline(Node* n) {
    std::vector<Value*> reads;  // from outside `n`, in order of first use
    std::unordered_set<Value*> seen;
    walk_node(
        n, [](Node*) {},
        [&](Value* v, Node*) {
          if (seen.insert(v).second && !defined_in(n, v)) reads.push_back(v);
        });

    auto body = std::make_shared<torch::jit::Graph>();
    std::unordered_map<Value*, Value*> env;
    std::vector<Value*> arguments;
    for (Value* v : reads) {
      if (v->node()->kind() == c10::prim::Constant) continue;
      Value* input = body->addInput()->setType(c10::unshapedType(v->type()));
      if (v->hasDebugName()) input->setDebugName(v->debugName());
      env[v] = input;
      arguments.push_back(v);
    }
    for (Value* v : reads) {
      if (v->node()->kind() != c10::prim::Constant) continue;
      env[v] = body->insertNode(body->createClone(v->node(), [](Value*) -> Value* {
                      throw std::logic_error("outline: a constant with inputs");
                    }))->output();
    }
    Node* copy = body->insertNode(body->createClone(n, [&](Value* v) { return env.at(v); }));
    if (copy->outputs().size() == 1) {
      body->registerOutput(copy->output());
    } else if (copy->outputs().empty()) {
      body->registerOutput(body->insertConstant(c10::IValue()));
    } else {
      body->registerOutput(body->insertNode(body->createTuple(copy->outputs()))->output());
    }
    body->lint();
    // A qualifier of its own, which no class of the tree can have: theirs end in _<number>.
    auto* function = cu_->create_function(
        c10::QualifiedName(prefix_ + ".forward_part" + std::to_string(parts_++), "run"), body);

    torch::jit::Graph& graph = *n->owningGraph();
    torch::jit::WithInsertPoint guard(n);
    Value* callee = graph.insertNode(graph.create(c10::prim::Constant))
                        ->s_(c10::attr::name, "run")
                        ->output()
                        ->setType(c10::FunctionType::create(function));
    std::vector<Value*> inputs{callee};
    inputs.insert(inputs.end(), arguments.begin(), arguments.end());
    Node* call = graph.insertNode(graph.create(c10::prim::CallFunction, inputs));
    call->output()->setType(body->outputs()[0]->type());
    if (n->outputs().size() == 1) {
      n->output()->replaceAllUsesWith(call->output());
    } else if (n->outputs().size() > 1) {
      Node* unpack = graph.insertNode(graph.createTupleUnpack(call->output()));
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        n->outputs()[i]->replaceAllUsesWith(unpack->outputs()[i]);
      }
    }
    n->destroy();
  }

  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  std::string prefix_;
  int parts_ = 0;
};

}  // namespace

torch::jit::Module build_stage_module(const ModelGraph& model, const StageWiring& wiring,
                                      const std::string& stage_name,
                                      const std::set<AttributePath>& paths) {
  const std::string prefix = "__torch__.ravnest." + identifier(stage_name);
  PrunedTree tree(const_cast<ModelGraph&>(model).module(), prefix);
  for (const auto& path : paths) tree.add(path);
  torch::jit::Module& stage = tree.root();

  auto graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<Value*, Value*> env;
  Value* self = graph->addInput("self")->setType(stage.type());
  env[model.self_value()] = self;
  const auto names = model.input_names();
  for (size_t i = 0; i < wiring.inputs.size(); ++i) {
    Value* v = wiring.inputs[i];
    const int k = wiring.input_sources[i].model_input;
    std::string name = k >= 0 && k < static_cast<int>(names.size()) ? names[k]
                                                                     : "x" + std::to_string(i);
    Value* input = graph->addInput(identifier(name));
    if (model.may_be_uninitialized(v)) {
      input->setType(c10::AnyType::get());
      env[v] = graph->insertUncheckedCast(input, c10::unshapedType(v->type()));
    } else {
      env[v] = input->setType(c10::unshapedType(v->type()));
    }
  }
  auto lookup = [&](Value* v) -> Value* {
    auto it = env.find(v);
    if (it == env.end()) {
      throw std::logic_error("stage " + stage_name + " uses %" + v->debugName() +
                             " which it neither computes nor receives");
    }
    return it->second;
  };
  for (Node* n : stage_nodes(model, wiring)) {
    Node* clone = graph->insertNode(graph->createClone(n, lookup));
    for (size_t i = 0; i < n->outputs().size(); ++i) env[n->outputs()[i]] = clone->outputs()[i];
  }
  retype_attribute_reads(graph->block());

  if (wiring.is_leaf) {
    if (model.graph()->outputs().size() == 1) {
      graph->registerOutput(lookup(model.graph()->outputs()[0]));
    } else {
      std::vector<Value*> outs;
      for (Value* v : model.graph()->outputs()) outs.push_back(lookup(v));
      graph->registerOutput(graph->insertNode(graph->createTuple(outs))->output());
    }
  } else {
    std::vector<Value*> outs;
    for (Value* v : wiring.outputs) outs.push_back(lookup(v));
    graph->registerOutput(graph->insertNode(graph->createTuple(outs))->output());
  }
  // The executor optimizes each called function on its own before inlining it: a condition the
  // forward computes from constants is an argument there, so a branch the whole graph drops stays,
  // and LibTorch 1.13's constant propagation throws on the unchecked_cast of None in such a branch
  // (F.interpolate's recompute_scale_factor). Folding what constants decide first leaves the parts
  // nothing to fold that the whole graph would not. This pass only evaluates nodes whose inputs
  // and outputs are immutable non-tensor values (ints, bools, strings, None, their tuples), and
  // removes what becomes unused, as the executor itself does before a graph first runs.
  torch::jit::ConstantPropagationImmutableTypes(graph);
  Outliner(tree.cu(), prefix).outline(graph->block());
  graph->lint();

  auto* forward = tree.cu()->create_function(
      c10::QualifiedName(*stage.type()->name(), "forward"), graph);
  stage.type()->addMethod(forward);
  return stage;
}

}  // namespace ravnest::graph
