#include "libs/training/checkpoint_recut.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <torch/optim/optimizer.h>

#include "libs/stage/stage_file.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/training/optimizer.h"

namespace ravnest::training {

namespace {

// A stage as its node would train it: the stage file on the CPU and its optimizer.
struct LoadedStage {
  std::shared_ptr<stage::Stage> stage;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

LoadedStage load(const CutStage& s, const config::OptimizerSpec& spec) {
  LoadedStage loaded;
  try {
    loaded.stage = stage::load_stage(s.stage_path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    throw std::runtime_error(s.node.name + "'s stage " + s.stage_path + ": " + e.what());
  }
  loaded.optimizer = make_optimizer(spec, optimized_parameters(*loaded.stage, s.node));
  return loaded;
}

StageCheckpoint load_named(const std::string& path, const CutStage& s) {
  try {
    return load_checkpoint(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(s.node.name + "'s checkpoint: " + e.what());
  }
}

// [outer]'s entries are "global.<name>" and "momentum.<name>".
std::string outer_name(const std::string& entry) {
  const auto dot = entry.find('.');
  return dot == std::string::npos ? entry : entry.substr(dot + 1);
}

// What one source stage gives a target: its tensors, its optimizer's per-parameter state and
// options, its [outer] entries, each by state-dict name.
struct SourceTensors {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>> states;
  std::unique_ptr<torch::optim::OptimizerOptions> options;
  std::map<std::string, at::Tensor> outer;  // by the whole entry name
};

void take_from(const CutStage& s, const std::string& path, const config::OptimizerSpec& spec,
               const std::set<std::string>& wanted, SourceTensors& into) {
  StageCheckpoint c = load_named(path, s);
  for (auto& [name, t] : c.state) {
    if (wanted.count(name)) into.tensors.emplace(name, t);  // the first holder's
  }
  for (auto& [entry, t] : c.outer) {
    if (wanted.count(outer_name(entry))) into.outer.emplace(entry, t);
  }
  if (c.optimizer.empty()) return;
  LoadedStage loaded = load(s, spec);
  try {
    restore_optimizer(*loaded.optimizer, c.optimizer);
  } catch (const std::exception& e) {
    throw std::runtime_error(s.node.name + "'s checkpoint: its optimizer state does not fit its "
                             "stage: " + std::string(e.what()));
  }
  if (!into.options && !loaded.optimizer->param_groups().empty()) {
    into.options = loaded.optimizer->param_groups().front().options().clone();
  }
  auto& states = loaded.optimizer->state();
  for (const auto& p : loaded.stage->named_parameters()) {
    if (!wanted.count(p.name) || into.states.count(p.name)) continue;
    auto it = states.find(torch_support::optimizer_state_key(p.value));
    if (it != states.end()) into.states.emplace(p.name, it->second->clone());
  }
}

// The source stage whose data lines a target stage at `position` of `count` keeps: the one of
// the same role (the root reads the inputs, the leaf the labels), a middle one otherwise.
size_t data_source(size_t position, size_t count, size_t sources) {
  if (position == 0) return 0;
  if (position + 1 == count) return sources - 1;
  return sources > 2 ? 1 : 0;
}

}  // namespace

void recut_checkpoints(const std::vector<CutStage>& from,
                       const std::vector<std::string>& checkpoint_paths,
                       const std::vector<CutStage>& to, const config::OptimizerSpec& optimizer,
                       const std::function<void(size_t, const StageCheckpoint&)>& write) {
  if (from.empty() || to.empty() || checkpoint_paths.size() != from.size()) {
    throw std::runtime_error("re-cut: " + std::to_string(from.size()) + " source stages, " +
                             std::to_string(checkpoint_paths.size()) + " checkpoints, " +
                             std::to_string(to.size()) + " target stages");
  }
  // First pass: what the cluster keeps as one, and which names each source holds.
  StageCheckpoint head;  // source position 0's, tensors dropped
  std::vector<std::set<std::string>> held(from.size());
  std::vector<std::string> data(from.size());
  uint64_t reduce_round = 0, shared_round = 0;
  at::Tensor stream;  // the random stream dropout draws from next
  const auto& chain = from.front().node.random_nodes;
  for (size_t i = 0; i < from.size(); ++i) {
    StageCheckpoint c = load_named(checkpoint_paths[i], from[i]);
    if (i == 0) {
      head = c;
      head.state.clear();
      head.outer.clear();
      head.optimizer.clear();
    } else if (c.identity != head.identity || c.updates != head.updates ||
               c.batches != head.batches) {
      throw std::runtime_error("re-cut: " + from[i].node.name + "'s checkpoint is of update " +
                               std::to_string(c.updates) + ", " + from[0].node.name + "'s of " +
                               std::to_string(head.updates) + " (or of another job)");
    }
    for (const auto& [name, t] : c.state) held[i].insert(name);
    data[i] = c.data;
    reduce_round = std::max(reduce_round, c.reduce_round);
    shared_round = std::max(shared_round, c.shared_round);
    const int id = from[i].node.node_id;
    if (chain.size() >= 2 && chain.front() == id) stream = c.next_random_state;
    if (chain.size() == 1 && chain.front() == id) stream = c.random_state;
  }
  if (!stream.defined()) stream = head.random_state;

  const auto& target_chain = to.front().node.random_nodes;
  for (size_t k = 0; k < to.size(); ++k) {
    const CutStage& target = to[k];
    LoadedStage loaded = load(target, optimizer);
    std::vector<stage::NamedTensor> named = loaded.stage->named_parameters();
    const size_t parameters = named.size();
    for (auto& b : loaded.stage->named_buffers()) named.push_back(std::move(b));
    std::set<std::string> wanted;
    for (const auto& t : named) wanted.insert(t.name);

    SourceTensors source;
    for (size_t i = 0; i < from.size(); ++i) {
      const bool holds = std::any_of(wanted.begin(), wanted.end(),
                                     [&](const std::string& n) { return held[i].count(n) > 0; });
      if (holds) take_from(from[i], checkpoint_paths[i], optimizer, wanted, source);
    }

    StageCheckpoint c = head;
    c.cluster = target.node.cluster;
    c.position = target.node.position;
    c.losses.clear();
    c.validation.clear();
    c.reduce_round = reduce_round;
    c.shared_round = shared_round;
    c.data = data[data_source(k, to.size(), from.size())];
    c.random_state = stream.clone();
    c.next_random_state = target_chain.size() >= 2 && target_chain.front() == target.node.node_id
                              ? stream.clone()
                              : at::Tensor();
    std::unordered_map<const void*, std::string> name_of;  // the optimizer's tensors
    for (size_t j = 0; j < named.size(); ++j) {
      const auto& t = named[j];
      auto it = source.tensors.find(t.name);
      if (it == source.tensors.end()) {
        throw std::runtime_error("re-cut: " + target.node.name + "'s stage holds " + t.name +
                                 ", which no stage of the source cluster holds");
      }
      if (it->second.sizes() != t.value.sizes() || it->second.scalar_type() != t.value.scalar_type()) {
        throw std::runtime_error("re-cut: " + t.name + " of " + target.node.name +
                                 "'s stage does not fit the source cluster's");
      }
      c.state.emplace_back(t.name, it->second);
      if (j < parameters) name_of.emplace(t.value.unsafeGetTensorImpl(), t.name);
    }
    for (const auto& [entry, t] : source.outer) c.outer.emplace_back(entry, t);
    if ((source.options || !source.states.empty()) && !loaded.optimizer->param_groups().empty()) {
      auto& group = loaded.optimizer->param_groups().front();
      if (source.options) group.set_options(source.options->clone());
      auto& states = loaded.optimizer->state();
      for (const auto& p : group.params()) {
        auto name = name_of.find(p.unsafeGetTensorImpl());
        if (name == name_of.end()) continue;
        auto state = source.states.find(name->second);
        if (state != source.states.end()) {
          states[torch_support::optimizer_state_key(p)] = state->second->clone();
        }
      }
      c.optimizer = save_optimizer(*loaded.optimizer);
    }
    write(k, c);
  }
}

}  // namespace ravnest::training
