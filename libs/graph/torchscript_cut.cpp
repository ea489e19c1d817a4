// ModelGraph as a CutModel (cut_model.h): TorchScript's profile, wiring and stage modules.
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "libs/graph/model_graph.h"
#include "libs/graph/profiler.h"
#include "libs/graph/randomness.h"
#include "libs/graph/stage_builder.h"
#include "libs/torch_support/module_file.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

namespace {

std::string type_name(const torch::jit::Value* v) {
  return c10::unshapedType(v->type())->annotation_str();
}

std::vector<std::pair<size_t, size_t>> ranges_of(const std::vector<CutStage>& stages) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& stage : stages) ranges.emplace_back(stage.first_unit, stage.end_unit);
  return ranges;
}

// Each stage's attribute paths; parameters the forward never reads travel with the root, so the
// fused state is complete.
std::vector<std::set<AttributePath>> held_paths(const ModelGraph& model,
                                                const std::vector<StageWiring>& wiring) {
  std::vector<std::set<AttributePath>> paths;
  std::set<AttributePath> all_paths;
  for (const auto& w : wiring) {
    paths.push_back(stage_attribute_paths(model, w));
    all_paths.insert(paths.back().begin(), paths.back().end());
  }
  if (!paths.empty()) {
    for (auto& path : uncovered_state(model, all_paths)) paths.front().insert(path);
  }
  return paths;
}

}  // namespace

void ModelGraph::check_inputs(size_t given) const { check_forward_inputs(*this, given); }

planner::ModelProfile ModelGraph::profile(const std::vector<at::Tensor>& inputs) const {
  return profile_model(*this, inputs).profile;
}

std::vector<CutStage> ModelGraph::cut(const std::vector<std::pair<size_t, size_t>>& ranges) const {
  const auto wiring = wire_stages(*this, ranges);
  const auto paths = held_paths(*this, wiring);
  std::vector<CutStage> out;
  for (size_t s = 0; s < wiring.size(); ++s) {
    const auto& w = wiring[s];
    CutStage stage;
    stage.first_unit = w.first_unit;
    stage.end_unit = w.end_unit;
    stage.is_leaf = w.is_leaf;
    for (size_t i = 0; i < w.inputs.size(); ++i) {
      const auto& source = w.input_sources[i];
      stage.inputs.push_back({w.inputs[i]->debugName(), type_name(w.inputs[i]), source.model_input,
                              source.stage, source.output});
    }
    for (size_t j = 0; j < w.outputs.size(); ++j) {
      stage.outputs.push_back(
          {w.outputs[j]->debugName(), type_name(w.outputs[j]), w.output_consumers[j]});
    }
    for (const auto& path : paths[s]) stage.held.push_back(join_path(path));
    out.push_back(std::move(stage));
  }
  return out;
}

SavedStage ModelGraph::save_stage(const std::vector<CutStage>& stages, size_t s,
                                  const std::string& stage_name, const std::string& path) const {
  // Wiring again from the ranges (a pass over the graph, cheap beside building and saving).
  const auto wiring = wire_stages(*this, ranges_of(stages));
  const auto paths = held_paths(*this, wiring);
  torch::jit::Module module = build_stage_module(*this, wiring.at(s), stage_name, paths.at(s));
  try {
    module.save(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": cannot save stage: " + torch_support::torch_message(e));
  }
  std::map<std::string, size_t> state_order;
  for (const auto& name : state_names()) state_order.emplace(name, state_order.size());
  SavedStage saved;
  saved.parameters = graph::state_names(module);
  std::stable_sort(saved.parameters.begin(), saved.parameters.end(),
                   [&](const std::string& a, const std::string& b) {
                     return state_order.at(a) < state_order.at(b);
                   });
  for (const auto& p : module.named_parameters()) saved.trained_parameters.push_back(p.name);
  for (const auto& p : module.parameters()) saved.parameter_count += p.numel();
  saved.draws_random_numbers = draws_random_numbers(module);
  return saved;
}

std::map<std::string, std::string> ModelGraph::canonical_names() const {
  std::unordered_map<const c10::TensorImpl*, std::string> first_name_of;
  std::map<std::string, std::string> canonical;
  auto note = [&](const std::string& name, const at::Tensor& t) {
    auto [it, fresh] = first_name_of.emplace(t.unsafeGetTensorImpl(), name);
    canonical[name] = it->second;
  };
  for (const auto& p : module_.named_parameters()) note(p.name, p.value);
  for (const auto& b : module_.named_buffers()) note(b.name, b.value);
  return canonical;
}

std::vector<std::string> ModelGraph::state_names() const { return graph::state_names(module_); }

std::vector<std::pair<std::string, at::Tensor>> ModelGraph::named_state() const {
  return graph::named_state(module_);
}

std::vector<std::pair<std::string, at::Tensor>> ModelGraph::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module_.named_parameters()) out.emplace_back(p.name, p.value);
  return out;
}

}  // namespace ravnest::graph
