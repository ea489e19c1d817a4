#include "libs/graph/stage_chain.h"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/autograd/autograd.h>

#include "libs/data/batch_order.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/stage/stage_file.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

StageChain StageChain::load(const std::string& plan_dir, std::vector<config::NodeMetadata> nodes) {
  StageChain chain;
  for (const auto& node : nodes) {
    const auto path = (std::filesystem::path(plan_dir) / node.stage_file).string();
    try {
      chain.stages_.push_back(stage::load_stage(path));
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (the stage of " + node.name + ")");
    }
  }
  chain.nodes_ = std::move(nodes);
  return chain;
}

void StageChain::train(bool on) {
  for (auto& stage : stages_) stage->train(on);
}

StageChain::Pass StageChain::forward(const std::vector<c10::IValue>& model_inputs) {
  std::unordered_map<int, size_t> position;
  for (size_t s = 0; s < nodes_.size(); ++s) position[nodes_[s].node_id] = s;
  Pass pass;
  pass.received.assign(nodes_.size(), {});
  pass.produced.assign(nodes_.size(), {});
  for (size_t s = 0; s < nodes_.size(); ++s) {
    const auto& node = nodes_[s];
    std::vector<c10::IValue> inputs;
    for (const auto& input : node.inputs) {
      c10::IValue value;
      if (input.model_input) {
        value = *input.model_input < static_cast<int>(model_inputs.size())
                    ? model_inputs[*input.model_input]
                    : c10::IValue();
      } else {
        auto producer = position.find(*input.from_node);
        if (producer == position.end() || producer->second >= s) {
          throw std::runtime_error(node.name + ": input " + input.value + " comes from node " +
                                   std::to_string(*input.from_node) + ", not earlier in the chain");
        }
        value = pass.produced[producer->second].at(input.from_output);
        if (value.isTensor() && value.toTensor().is_floating_point()) {
          value = value.toTensor().detach().requires_grad_(true);
        }
      }
      inputs.push_back(value);
    }
    pass.received[s] = inputs;
    c10::IValue result = stages_[s]->forward(inputs);
    if (node.returns_model_output) {
      pass.output = result;
    } else {
      const auto& items = result.toTupleRef().elements();
      pass.produced[s].assign(items.begin(), items.end());
    }
  }
  return pass;
}

void StageChain::backward(const Pass& pass, const at::Tensor& loss) {
  std::unordered_map<int, size_t> position;
  for (size_t s = 0; s < nodes_.size(); ++s) position[nodes_[s].node_id] = s;
  // Gradients for each stage's outputs, summed over their consumers.
  std::vector<std::vector<at::Tensor>> output_grads(nodes_.size());
  for (size_t s = 0; s < nodes_.size(); ++s) output_grads[s].resize(pass.produced[s].size());

  for (size_t s = nodes_.size(); s-- > 0;) {
    if (nodes_[s].returns_model_output) {
      torch::autograd::backward({loss});
    } else {
      std::vector<at::Tensor> tensors, grads;
      for (size_t j = 0; j < pass.produced[s].size(); ++j) {
        const auto& value = pass.produced[s][j];
        if (!value.isTensor() || !output_grads[s][j].defined()) continue;
        if (!value.toTensor().requires_grad()) continue;
        tensors.push_back(value.toTensor());
        grads.push_back(output_grads[s][j]);
      }
      if (!tensors.empty()) torch::autograd::backward(tensors, grads);
    }
    // What this stage computed for its inputs goes to their producers.
    const auto& inputs = nodes_[s].inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].from_node || !pass.received[s][i].isTensor()) continue;
      const at::Tensor grad = pass.received[s][i].toTensor().grad();
      if (!grad.defined()) continue;
      auto& slot = output_grads[position.at(*inputs[i].from_node)][inputs[i].from_output];
      slot = slot.defined() ? slot + grad : grad;
    }
  }
}

namespace {

// The tensors of a value, depth first: tuples, lists and dicts (in their order) opened.
void flatten(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) out.push_back(v.toTensor());
  else if (v.isTuple()) for (const auto& e : v.toTupleRef().elements()) flatten(e, out);
  else if (v.isList()) for (const auto& e : v.toListRef()) flatten(e, out);
  else if (v.isGenericDict()) for (const auto& e : v.toGenericDict()) flatten(e.value(), out);
}

}  // namespace

at::Tensor sum_of_outputs(const c10::IValue& output) {
  std::vector<at::Tensor> tensors;
  flatten(output, tensors);
  at::Tensor total;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_floating_point()) continue;
    total = total.defined() ? total + t.sum() : t.sum();
  }
  if (!total.defined()) throw std::runtime_error("the model's output holds no floating-point tensor");
  return total;
}

double ChainComparison::max() const { return std::max({output_diff, grad_diff, buffer_diff}); }

namespace {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() && !b.defined()) return 0;
  if (!a.defined()) return b.abs().max().item<double>();
  if (!b.defined()) return a.abs().max().item<double>();
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Before the slot takes `diff`: afterwards diff can never exceed the maximum.
void note(double diff, const std::string& what, double& slot, ChainComparison& result) {
  if (diff > 0 && (result.worst.empty() || diff > result.max())) result.worst = what;
  if (diff > slot) slot = diff;
}

// The example inputs cut along dim 0 as the root cuts a batch, each side with its own copy (so
// that nothing one side does in place reaches the other), and each part's loss weight.
struct Parts {
  std::vector<std::vector<c10::IValue>> model, chain;
  std::vector<double> weights;
};

Parts cut_inputs(const std::vector<at::Tensor>& inputs, int micro_batches) {
  Parts parts;
  auto copy = [](const at::Tensor& t) { return t.defined() ? t.clone() : t; };
  if (micro_batches == 1) {
    parts.model.emplace_back();
    parts.chain.emplace_back();
    for (const auto& t : inputs) {
      parts.model.back().push_back(copy(t));
      parts.chain.back().push_back(copy(t));
    }
    parts.weights.push_back(1.0);
    return parts;
  }
  if (inputs.empty()) throw std::invalid_argument("no example input to cut into micro-batches");
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = inputs[i].defined() && inputs[i].dim() > 0 ? inputs[i].size(0) : -1;
    if (n < 0 || (batch >= 0 && n != batch)) {
      throw std::invalid_argument("example input " + std::to_string(i) +
                                  " does not share dim 0 with the others, so the batch cannot " +
                                  "be cut into micro-batches");
    }
    batch = n;
  }
  for (const auto& [begin, end] : data::split_micro_batches(batch, micro_batches)) {
    parts.model.emplace_back();
    parts.chain.emplace_back();
    for (const auto& t : inputs) {
      parts.model.back().push_back(t.slice(0, begin, end).clone());
      parts.chain.back().push_back(t.slice(0, begin, end).clone());
    }
    parts.weights.push_back(static_cast<double>(end - begin) / static_cast<double>(batch));
  }
  return parts;
}

}  // namespace

ChainComparison compare_with_model(const std::string& model_path, StageChain& chain,
                                   const std::vector<at::Tensor>& inputs, uint64_t seed,
                                   int micro_batches) {
  if (micro_batches < 1) throw std::invalid_argument("compare_with_model: micro_batches < 1");
  const torch_support::EagerNumerics eager;  // as the daemons compute: the model's second run is not rewritten
  const Parts parts = cut_inputs(inputs, micro_batches);
  const size_t count = parts.weights.size();
  // " of micro-batch m" in reports, nothing when there is only one.
  auto of_micro = [&](size_t m) {
    return count == 1 ? std::string() : " of micro-batch " + std::to_string(m);
  };

  const std::shared_ptr<stage::Stage> model = stage::load_stage(model_path);
  model->train(true);
  std::vector<c10::IValue> expected;
  torch::manual_seed(seed);
  for (size_t m = 0; m < count; ++m) {
    try {
      expected.push_back(model->forward(parts.model[m]));
      (sum_of_outputs(expected.back()) * parts.weights[m]).backward();
    } catch (const std::exception& e) {
      const std::string which = count == 1 ? "" : " on micro-batch " + std::to_string(m);
      const std::string reason = torch_support::torch_message(e);
      throw WholeModelFailure(model_path + ": the whole model fails" + which + ": " + reason,
                              reason);
    }
  }

  ChainComparison result;
  // GPipe: every micro-batch forward through every stage, then every backward; a pass keeps its
  // graph alive meanwhile, as the daemons keep theirs.
  chain.train(true);
  torch::manual_seed(seed);
  std::vector<StageChain::Pass> passes;
  std::vector<std::unordered_map<const c10::TensorImpl*, at::Tensor>> micro_grads;
  std::string failed;
  try {
    for (size_t m = 0; m < count; ++m) {
      failed = "the chain's forward" + of_micro(m);
      passes.push_back(chain.forward(parts.chain[m]));
    }
    for (size_t m = 0; m < count; ++m) {
      failed = "the chain's backward" + of_micro(m);
      chain.backward(passes[m], sum_of_outputs(passes[m].output) * parts.weights[m]);
      // Each micro-batch's gradients apart: a tensor tied across stages is summed below as
      // autograd sums it in the whole model, the stages' shares of one micro-batch first.
      micro_grads.emplace_back();
      for (auto& stage : chain.stages()) {
        for (const auto& p : stage->parameters()) {
          at::Tensor grad = p.grad();
          if (!grad.defined()) continue;
          micro_grads.back()[p.unsafeGetTensorImpl()] = grad.clone();
          p.mutable_grad().reset();
        }
      }
    }
  } catch (const std::exception& e) {
    result.output_diff = std::numeric_limits<double>::infinity();
    result.worst = failed;
    result.failure = failed + " fails: " + torch_support::torch_message(e);
    return result;
  }

  for (size_t m = 0; m < count; ++m) {
    std::vector<at::Tensor> want, got;
    flatten(expected[m], want);
    flatten(passes[m].output, got);
    if (want.size() != got.size()) {
      result.output_diff = std::numeric_limits<double>::infinity();
      result.worst = "the chain returns " + std::to_string(got.size()) + " tensors, the model " +
                     std::to_string(want.size());
      return result;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      note(max_abs_diff(want[i], got[i]), "output " + std::to_string(i) + of_micro(m),
           result.output_diff, result);
    }
  }

  // Gradients: the model's tensor for each name; the chain's sum over every distinct tensor of
  // every stage that holds a name of the same model tensor.
  std::map<std::string, at::Tensor> model_params;
  std::unordered_map<const c10::TensorImpl*, std::vector<std::string>> names_of;
  for (const auto& p : model->named_parameters()) {
    model_params[p.name] = p.value;
    names_of[p.value.unsafeGetTensorImpl()].push_back(p.name);
  }
  // A format that names a tied tensor once (torch.export's, as nn.Module.named_parameters) leaves
  // the other names to the metadata's tied_parameters.
  auto model_name_of = [&](size_t s, const std::string& name) {
    if (model_params.count(name)) return name;
    const auto& tied = chain.nodes()[s].tied_parameters;
    const auto it = tied.find(name);
    return it == tied.end() ? name : it->second;
  };
  std::map<std::string, at::Tensor> chain_grads;  // keyed by the model tensor's first name
  std::map<std::string, bool> held;
  for (const auto& grads : micro_grads) {
    // This micro-batch's, summed over the stages from the last: autograd adds a tensor's
    // gradients as its uses' backward functions run, the last use's first ((g3 + g2) + g1 for a
    // weight used in three stages; two holders' order does not matter).
    std::map<std::string, at::Tensor> share;
    for (size_t s = chain.stages().size(); s-- > 0;) {
      std::unordered_set<const c10::TensorImpl*> seen;
      for (const auto& p : chain.stages()[s]->named_parameters()) {
        auto it = model_params.find(model_name_of(s, p.name));
        if (it == model_params.end()) {
          if (&grads == &micro_grads.front()) {
            note(std::numeric_limits<double>::infinity(), "unknown parameter " + p.name,
                 result.grad_diff, result);
          }
          continue;
        }
        const std::string& canonical = names_of.at(it->second.unsafeGetTensorImpl()).front();
        held[canonical] = true;
        if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
        auto g = grads.find(p.value.unsafeGetTensorImpl());
        if (g == grads.end()) continue;
        auto& slot = share[canonical];
        slot = slot.defined() ? slot + g->second : g->second;
      }
    }
    for (auto& [canonical, g] : share) {
      auto& slot = chain_grads[canonical];
      slot = slot.defined() ? slot + g : g;
    }
  }
  for (const auto& [impl, names] : names_of) {
    const std::string& canonical = names.front();
    if (!held[canonical]) {
      note(std::numeric_limits<double>::infinity(), "no stage holds " + canonical,
           result.grad_diff, result);
      continue;
    }
    note(max_abs_diff(model_params.at(canonical).grad(), chain_grads[canonical]),
         "gradient of " + canonical, result.grad_diff, result);
  }

  std::map<std::string, at::Tensor> model_buffers;
  for (const auto& b : model->named_buffers()) model_buffers[b.name] = b.value;
  for (auto& stage : chain.stages()) {
    for (const auto& b : stage->named_buffers()) {
      auto it = model_buffers.find(b.name);
      double diff = it == model_buffers.end() ? std::numeric_limits<double>::infinity()
                                              : max_abs_diff(it->second, b.value);
      note(diff, "buffer " + b.name, result.buffer_diff, result);
    }
  }
  return result;
}

}  // namespace ravnest::graph
