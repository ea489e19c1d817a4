#include "libs/graph/profiler.h"

#include <chrono>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

using torch::jit::Node;
using torch::jit::Value;

int64_t ivalue_bytes(const c10::IValue& value) {
  if (value.isTensor()) {
    const auto& t = value.toTensor();
    return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
  }
  if (value.isList()) {
    int64_t total = 0;
    for (const auto& item : value.toListRef()) total += ivalue_bytes(item);
    return total;
  }
  if (value.isTuple()) {
    int64_t total = 0;
    for (const auto& item : value.toTupleRef().elements()) total += ivalue_bytes(item);
    return total;
  }
  return 8;
}

void check_forward_inputs(const ModelGraph& model, size_t given) {
  const size_t total = model.model_inputs().size();
  const auto input_names = model.input_names();
  // Every input comes from a dataset's tensors and crosses the wire as one: an int, a list or
  // a string argument can be neither.
  for (size_t k = 0; k < total; ++k) {
    auto type = model.model_inputs()[k]->type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    if (type->kind() != c10::TypeKind::TensorType) {
      throw std::invalid_argument(model.path() + ": forward's input '" + input_names.at(k) +
                                  "' is " + model.model_inputs()[k]->type()->annotation_str() +
                                  "; every input must be a tensor (a dataset feeds tensors)");
    }
  }
  if (given >= model.required_inputs() && given <= total) return;
  std::string names;
  for (const auto& name : input_names) names += (names.empty() ? "" : ", ") + name;
  throw std::invalid_argument(model.path() + ": forward takes " + std::to_string(total) +
                              " input(s) (" + names + "); --example-input gave " +
                              std::to_string(given));
}

namespace {

// Runs one top-level node. Nodes with an operator run directly; control flow and everything
// else runs as a one-node graph.
class NodeRunner {
 public:
  explicit NodeRunner(Node* node) : node_(node) {
    if (node->kind() == c10::prim::Constant || node->kind() == c10::prim::GetAttr) return;
    if (node->blocks().empty() && node->maybeOperator()) {
      operation_ = node->getOperation();
      return;
    }
    auto graph = std::make_shared<torch::jit::Graph>();
    std::unordered_map<Value*, Value*> outer;
    Node* clone = graph->createClone(node, [&](Value* v) {
      auto it = outer.find(v);
      if (it != outer.end()) return it->second;
      Value* input = graph->addInput()->setType(v->type());
      outer_values_.push_back(v);
      outer[v] = input;
      return input;
    });
    graph->insertNode(clone);
    Node* tuple = graph->insertNode(graph->createTuple(clone->outputs()));
    graph->registerOutput(tuple->output());
    function_ = std::make_unique<torch::jit::GraphFunction>("ravnest_profile_node", graph,
                                                            nullptr);
  }

  void run(std::unordered_map<const Value*, c10::IValue>& env) {
    if (node_->kind() == c10::prim::Constant) {
      env[node_->output()] = *torch::jit::toIValue(node_->output());
      return;
    }
    if (node_->kind() == c10::prim::GetAttr) {
      env[node_->output()] =
          env.at(node_->input(0)).toObjectRef().getAttr(node_->s(c10::attr::name));
      return;
    }
    torch::jit::Stack stack;
    if (operation_) {
      for (Value* v : node_->inputs()) stack.push_back(env.at(v));
      (*operation_)(stack);
      for (size_t i = 0; i < node_->outputs().size(); ++i) {
        env[node_->outputs()[i]] = stack[stack.size() - node_->outputs().size() + i];
      }
      return;
    }
    for (Value* v : outer_values_) stack.push_back(env.at(v));
    function_->run(stack);
    const auto& results = stack.back().toTupleRef().elements();
    for (size_t i = 0; i < node_->outputs().size(); ++i) env[node_->outputs()[i]] = results[i];
  }

 private:
  Node* node_;
  c10::optional<torch::jit::Operation> operation_;
  std::vector<Value*> outer_values_;
  std::unique_ptr<torch::jit::GraphFunction> function_;
};

// Tensor attribute paths that a unit reads, at any depth.
void collect_tensor_attributes(const ModelGraph& model, torch::jit::Block* block,
                               std::vector<const Value*>& out) {
  auto visit_inputs = [&](at::ArrayRef<Value*> inputs) {
    for (Value* v : inputs) {
      if (model.attribute_path(v) && v->type()->kind() == c10::TypeKind::TensorType) {
        out.push_back(v);
      }
    }
  };
  for (Node* n : block->nodes()) {
    visit_inputs(n->inputs());
    for (auto* sub : n->blocks()) collect_tensor_attributes(model, sub, out);
  }
  visit_inputs(block->outputs());
}

using Env = std::unordered_map<const Value*, c10::IValue>;
using TensorSpans = std::unordered_map<const c10::TensorImpl*, std::pair<int, int>>;

// Runs forward node by node `repeats` times on `copy`; returns each unit's fastest time (the first
// run is a warm-up when there are several) and leaves the last run's values in *env.
std::vector<double> time_units(const ModelGraph& model, torch::jit::Module& copy,
                               const std::vector<at::Tensor>& inputs, int repeats, Env* env) {
  const auto& graph = model.graph();
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  std::vector<NodeRunner> runners;
  runners.reserve(nodes.size());
  for (Node* n : nodes) runners.emplace_back(n);

  std::vector<double> seconds(model.units().size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    env->clear();
    (*env)[model.self_value()] = copy._ivalue();
    for (size_t i = 0; i < model.model_inputs().size(); ++i) {
      // Missing trailing inputs take their defaults, which forward's graph does not hold.
      (*env)[model.model_inputs()[i]] = i < inputs.size() ? c10::IValue(inputs[i]) : c10::IValue();
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int unit = model.unit_of(nodes[i]);
      auto start = std::chrono::steady_clock::now();
      try {
        runners[i].run(*env);
      } catch (const std::exception& e) {
        throw std::runtime_error(model.path() + ": forward fails on the example input: " +
                                 torch_support::torch_message(e));
      }
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (unit >= 0 && (r > 0 || repeats <= 1)) seconds[unit] = std::min(seconds[unit], elapsed);
    }
  }
  return seconds;
}

// Parameters and buffers, attributed to the first unit that reads them (tied tensors count
// once; those the forward never reads still travel with the root stage). Returns the first and
// last unit reading each: a cut between them puts the tensor on two nodes, whose gradients must
// then be exchanged every step.
TensorSpans attribute_parameters(const ModelGraph& model, torch::jit::Module& copy,
                                 planner::ModelProfile* profile) {
  std::unordered_set<const c10::TensorImpl*> trainable;
  for (const auto& p : copy.named_parameters()) {
    if (p.value.requires_grad()) trainable.insert(p.value.unsafeGetTensorImpl());
  }
  std::unordered_set<const c10::TensorImpl*> counted;
  TensorSpans reader_span;
  for (size_t u = 0; u < profile->units.size(); ++u) {
    auto& unit = profile->units[u];
    Node* node = model.units()[u];
    std::vector<const Value*> attributes;
    for (Value* v : node->inputs()) {
      if (model.attribute_path(v) && v->type()->kind() == c10::TypeKind::TensorType) {
        attributes.push_back(v);
      }
    }
    for (auto* block : node->blocks()) collect_tensor_attributes(model, block, attributes);
    for (const Value* v : attributes) {
      c10::IValue value = copy._ivalue();
      for (const auto& name : *model.attribute_path(v)) value = value.toObjectRef().getAttr(name);
      if (!value.isTensor() || !value.toTensor().defined()) continue;
      const auto* impl = value.toTensor().unsafeGetTensorImpl();
      auto span = reader_span.emplace(impl, std::make_pair(int(u), int(u))).first;
      span->second.second = static_cast<int>(u);
      if (!counted.insert(impl).second) continue;
      int64_t bytes = ivalue_bytes(value);
      unit.parameter_bytes += bytes;
      if (trainable.count(impl)) unit.trainable_bytes += bytes;
    }
  }
  if (!profile->units.empty()) {
    for (const auto& p : copy.named_attributes()) {
      if (!p.value.isTensor() || !p.value.toTensor().defined()) continue;
      const auto* impl = p.value.toTensor().unsafeGetTensorImpl();
      if (!counted.insert(impl).second) continue;
      profile->units[0].parameter_bytes += ivalue_bytes(p.value);
      if (trainable.count(impl)) profile->units[0].trainable_bytes += ivalue_bytes(p.value);
    }
  }
  return reader_span;
}

// boundary_bytes[i]: every value alive across a cut after unit i, and every tensor read on both
// sides of it.
std::vector<int64_t> boundary_bytes(const ModelGraph& model,
                                    const std::unordered_map<const Value*, int64_t>& value_bytes,
                                    const TensorSpans& reader_span, int n) {
  std::vector<int64_t> boundaries(n > 0 ? n - 1 : 0, 0);
  std::vector<int64_t> delta(n + 1, 0);
  for (const Value* v : model.positioned_values()) {
    int from = std::max(model.defined_at(v), 0);
    int to = std::min(model.last_used_at(v), n - 1);  // boundaries [from, to)
    if (from >= to) continue;
    delta[from] += value_bytes.at(v);
    delta[to] -= value_bytes.at(v);
  }
  for (const auto& [impl, span] : reader_span) {
    if (span.first >= span.second) continue;
    const auto bytes = static_cast<int64_t>(impl->numel() * impl->itemsize());
    delta[span.first] += bytes;
    delta[span.second] -= bytes;
  }
  int64_t running = 0;
  for (int i = 0; i + 1 < n; ++i) {
    running += delta[i];
    boundaries[i] = running;
  }
  return boundaries;
}

}  // namespace

ModelMeasurements profile_model(const ModelGraph& model, const std::vector<at::Tensor>& inputs,
                                int repeats) {
  check_forward_inputs(model, inputs.size());
  torch::jit::Module copy = const_cast<ModelGraph&>(model).module().deepcopy();
  torch::NoGradGuard no_grad;
  torch::jit::GraphOptimizerEnabledGuard no_optimizer(false);

  Env env;
  const std::vector<double> seconds = time_units(model, copy, inputs, repeats, &env);

  ModelMeasurements result;
  auto& profile = result.profile;
  for (const Value* v : model.positioned_values()) result.value_bytes[v] = ivalue_bytes(env.at(v));
  const size_t unit_count = model.units().size();
  profile.units.resize(unit_count);
  for (size_t u = 0; u < unit_count; ++u) {
    auto& unit = profile.units[u];
    unit.label = model.unit_label(u);
    unit.forward_seconds = std::isfinite(seconds[u]) ? seconds[u] : 0.0;
    for (Value* out : model.units()[u]->outputs()) {
      if (out->type()->kind() == c10::TypeKind::TensorType) {
        unit.activation_bytes += result.value_bytes.at(out);
      }
    }
  }
  const TensorSpans reader_span = attribute_parameters(model, copy, &profile);
  profile.boundary_bytes =
      boundary_bytes(model, result.value_bytes, reader_span, static_cast<int>(unit_count));
  profile.cut_allowed = model.cut_allowed();
  for (size_t i = 0; i < inputs.size(); ++i) profile.input_bytes += ivalue_bytes(inputs[i]);
  for (Value* out : model.graph()->outputs()) profile.output_bytes += ivalue_bytes(env.at(out));
  profile.batch_size = !inputs.empty() && inputs[0].dim() > 0 ? inputs[0].size(0) : 1;
  return result;
}

}  // namespace ravnest::graph
