#include "libs/graph/randomness.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

namespace ravnest::graph {

namespace {

bool is_dropout_of_zero(const torch::jit::Node* node) {
  const std::string kind = node->kind().toQualString();
  if (kind.find("dropout") == std::string::npos || node->inputs().size() < 2) return false;
  auto p = torch::jit::toIValue(node->input(1));
  return p && p->isDouble() && p->toDouble() == 0.0;
}

bool block_draws(const torch::jit::Block* block) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->isNondeterministic() && !is_dropout_of_zero(node)) return true;
    for (const torch::jit::Block* inner : node->blocks()) {
      if (block_draws(inner)) return true;
    }
  }
  return false;
}

}  // namespace

bool draws_random_numbers(const torch::jit::Module& module) {
  auto graph = torch::jit::toGraphFunction(module.get_method("forward").function()).graph()->copy();
  torch::jit::Inline(*graph);
  return block_draws(graph->block());
}

}  // namespace ravnest::graph
