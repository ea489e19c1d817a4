#include "libs/torch_support/traced_mode.h"

#include <unordered_set>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

namespace ravnest::torch_support {

namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// The operator's mode argument, and the running statistics that must be kept for the mode to
// matter (-1: none needed).
struct ModeArgument {
  size_t mode;
  int running_mean;
};

bool mode_argument(const Node* n, ModeArgument* out) {
  static const c10::Symbol dropouts[] = {
      c10::Symbol::fromQualString("aten::dropout"),
      c10::Symbol::fromQualString("aten::dropout_"),
      c10::Symbol::fromQualString("aten::feature_dropout"),
      c10::Symbol::fromQualString("aten::feature_dropout_"),
      c10::Symbol::fromQualString("aten::alpha_dropout"),
      c10::Symbol::fromQualString("aten::alpha_dropout_"),
      c10::Symbol::fromQualString("aten::feature_alpha_dropout"),
      c10::Symbol::fromQualString("aten::feature_alpha_dropout_")};
  static const c10::Symbol batch_norm = c10::Symbol::fromQualString("aten::batch_norm");
  static const c10::Symbol instance_norm = c10::Symbol::fromQualString("aten::instance_norm");
  for (const auto& kind : dropouts) {
    if (n->kind() == kind && n->inputs().size() == 3) {
      *out = {2, -1};
      return true;
    }
  }
  if ((n->kind() == batch_norm || n->kind() == instance_norm) && n->inputs().size() == 9) {
    *out = {5, 3};
    return true;
  }
  return false;
}

bool is_constant(const Value* v) { return v->node()->kind() == c10::prim::Constant; }

bool is_none(const Value* v) { return v->type()->kind() == c10::TypeKind::NoneType; }

// `self.num_batches_tracked.add_(...)` of the method's own module.
bool counts_batches(const Node* n, const Value* self) {
  static const c10::Symbol add_ = c10::Symbol::fromQualString("aten::add_");
  if (n->kind() != add_ || n->inputs().empty()) return false;
  const Node* read = n->input(0)->node();
  return read->kind() == c10::prim::GetAttr && read->input(0) == self &&
         read->s(c10::attr::name) == "num_batches_tracked";
}

size_t rewrite_block(Graph& graph, torch::jit::Block* block, Value* self, bool top_level) {
  size_t rewritten = 0;
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* n : nodes) {
    for (auto* sub : n->blocks()) rewritten += rewrite_block(graph, sub, self, false);
    ModeArgument argument{};
    if (mode_argument(n, &argument)) {
      if (!is_constant(n->input(argument.mode))) continue;
      if (argument.running_mean >= 0 && is_none(n->input(argument.running_mean))) continue;
      torch::jit::WithInsertPoint here(n);
      n->replaceInput(argument.mode, graph.insertGetAttr(self, "training"));
      ++rewritten;
    } else if (top_level && counts_batches(n, self)) {
      // Under `if self.training:`, as BatchNorm's scripted forward has it. add_ returns its
      // first input: a use of its result reads the buffer itself.
      torch::jit::WithInsertPoint here(n);
      Value* training = graph.insertGetAttr(self, "training");
      Node* guard = graph.create(c10::prim::If, {training}, 0);
      guard->addBlock();
      guard->addBlock();
      guard->insertBefore(n);
      n->output()->replaceAllUsesWith(n->input(0));
      n->moveBefore(guard->blocks()[0]->return_node());
      ++rewritten;
    }
  }
  return rewritten;
}

}  // namespace

size_t follow_training_flag(torch::jit::Module& module) {
  size_t rewritten = 0;
  std::unordered_set<const torch::jit::Function*> seen;  // a type's methods are shared
  for (const torch::jit::Module& owner : module.modules()) {
    if (!owner.type()->hasAttribute("training")) continue;
    for (const torch::jit::Method& method : owner.get_methods()) {
      if (!seen.insert(&method.function()).second) continue;
      auto* function = torch::jit::tryToGraphFunction(method.function());
      if (!function) continue;
      std::shared_ptr<Graph> graph = function->graph();
      Value* self = graph->inputs().at(0);
      rewritten += rewrite_block(*graph, graph->block(), self, true);
    }
  }
  return rewritten;
}

}  // namespace ravnest::torch_support
