#include "libs/graph/exported_cut_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/autograd/grad_mode.h>

#include "libs/exported/exported_cut.h"
#include "libs/exported/exported_module.h"
#include "libs/exported/exported_program.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/pt2_writer.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

namespace {

using exported::Argument;
using exported::ExportedProgram;
using exported::InputSpec;

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
}

int64_t value_bytes_of(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  if (v.isTensorList()) {
    int64_t total = 0;
    for (const at::Tensor& t : v.toTensorVector()) total += tensor_bytes(t);
    return total;
  }
  return v.isNone() ? 0 : 8;
}

// Whether a node draws from the generator in training mode (randomness.h's question for
// TorchScript): dropout and its kin, bernoulli, the rand family, and attention with dropout.
bool draws_random(const exported::Node& node) {
  const std::string op = exported::operator_name(node.target).name;
  if (op.empty()) return false;
  for (const char* word : {"dropout", "bernoulli", "rand", "normal", "uniform", "multinomial",
                           "exponential", "geometric", "cauchy", "log_normal"}) {
    if (op.find(word) != std::string::npos) return true;
  }
  if (op.find("scaled_dot_product") != std::string::npos) {
    for (const auto& input : node.inputs) {
      if (input.name == "dropout_p" && input.arg.kind == Argument::Kind::kFloat &&
          input.arg.real != 0) {
        return true;
      }
    }
  }
  return false;
}

class ExportedCutModel final : public CutModel {
 public:
  explicit ExportedCutModel(const std::string& path)
      : path_(path),
        archive_(exported::read_pt2_archive(path)),
        module_(exported::ExportedModule::from_archive(archive_)),
        units_(exported::program_units(archive_.program)) {
    const ExportedProgram& program = archive_.program;
    for (const InputSpec& spec : program.input_specs) {
      switch (spec.kind) {
        case InputSpec::Kind::kUserInput: user_inputs_.push_back(&spec); break;
        case InputSpec::Kind::kParameter:
        case InputSpec::Kind::kBuffer:
        case InputSpec::Kind::kTensorConstant:
          state_of_placeholder_[spec.arg.name] = spec.target;
          break;
        default: break;
      }
    }
    for (const auto& batch : exported::user_input_batches(archive_.model_json, program, path)) {
      if (!batch.dynamic && batch.size > 0 && static_batch_ == 0) static_batch_ = batch.size;
    }
  }

  const std::string& path() const override { return path_; }
  std::string format() const override { return "torch.export"; }
  size_t unit_count() const override { return archive_.program.nodes.size(); }
  const std::vector<bool>& cut_allowed() const override { return units_.cut_allowed; }
  int64_t static_batch() const override { return static_batch_; }

  void check_inputs(size_t given) const override {
    std::string names;
    for (const InputSpec* spec : user_inputs_) {
      const std::string& name = spec->arg.name;
      names += (names.empty() ? "" : ", ") + name;
      if (spec->arg.kind != Argument::Kind::kTensor) {
        throw std::invalid_argument(path_ + ": the exported program's input '" + name +
                                    "' is not a tensor; every input must be a tensor (a dataset "
                                    "feeds tensors)");
      }
    }
    if (given == user_inputs_.size()) return;
    throw std::invalid_argument(path_ + ": the exported program takes " +
                                std::to_string(user_inputs_.size()) + " input(s) (" + names +
                                "); --example-input gave " + std::to_string(given));
  }

  planner::ModelProfile profile(const std::vector<at::Tensor>& inputs) const override {
    check_inputs(inputs.size());
    const ExportedProgram& program = archive_.program;
    const size_t n = program.nodes.size();
    exported::ExportedModule copy = module_.clone();  // the model's buffers stay as they were
    copy.train(true);
    torch::NoGradGuard no_grad;

    std::vector<double> seconds(n, std::numeric_limits<double>::infinity());
    std::unordered_map<std::string, int64_t> bytes_of;  // by value name
    std::vector<int64_t> activation(n, 0);
    std::vector<c10::IValue> outputs;
    constexpr int kRepeats = 3;  // the first a warm-up
    for (int r = 0; r < kRepeats; ++r) {
      std::vector<c10::IValue> args(inputs.begin(), inputs.end());
      try {
        outputs = copy.forward_observed(
            std::move(args), [&](size_t i, double s, const std::vector<c10::IValue>& produced) {
              if (r > 0) seconds[i] = std::min(seconds[i], s);
              if (r + 1 < kRepeats) return;
              std::vector<std::string> names;
              for (const auto& out : program.nodes[i].outputs) {
                for (const auto& name : out.value_names()) names.push_back(name);
              }
              int64_t total = 0;
              for (size_t k = 0; k < produced.size(); ++k) {
                const int64_t b = value_bytes_of(produced[k]);
                total += b;
                if (k < names.size() && !names[k].empty()) bytes_of[names[k]] = b;
              }
              activation[i] = total;
            });
      } catch (const std::exception& e) {
        throw std::runtime_error(path_ + ": forward fails on the example input: " +
                                 torch_support::torch_message(e));
      }
    }

    planner::ModelProfile profile;
    profile.units.resize(n);
    for (size_t u = 0; u < n; ++u) {
      profile.units[u].label = units_.labels.at(u);
      profile.units[u].forward_seconds = std::isfinite(seconds[u]) ? seconds[u] : 0.0;
      profile.units[u].activation_bytes = activation[u];
    }
    for (size_t i = 0; i < user_inputs_.size() && i < inputs.size(); ++i) {
      bytes_of[user_inputs_[i]->arg.name] = tensor_bytes(inputs[i]);
      profile.input_bytes += tensor_bytes(inputs[i]);
    }
    for (const auto& out : outputs) profile.output_bytes += value_bytes_of(out);
    profile.batch_size = !inputs.empty() && inputs[0].dim() > 0 ? inputs[0].size(0) : 1;
    profile.cut_allowed = units_.cut_allowed;

    // Who defines and who last reads each value, and which units read each state tensor.
    std::unordered_map<std::string, int> defined_at, last_used_at;
    for (const InputSpec* spec : user_inputs_) defined_at[spec->arg.name] = 0;
    std::unordered_map<const c10::TensorImpl*, std::pair<int, int>> reader_span;
    std::unordered_set<const c10::TensorImpl*> counted;
    std::unordered_set<const c10::TensorImpl*> trainable;
    for (const auto& [name, t] : archive_.weights) {
      if (t.requires_grad()) trainable.insert(t.unsafeGetTensorImpl());
    }
    auto attribute = [&](size_t unit, const at::Tensor& t) {
      const auto* impl = t.unsafeGetTensorImpl();
      auto span = reader_span.emplace(impl, std::make_pair(int(unit), int(unit))).first;
      span->second.second = static_cast<int>(unit);
      if (!counted.insert(impl).second) return;
      profile.units[unit].parameter_bytes += tensor_bytes(t);
      if (trainable.count(impl)) profile.units[unit].trainable_bytes += tensor_bytes(t);
    };
    for (size_t u = 0; u < n; ++u) {
      for (const auto& input : program.nodes[u].inputs) {
        for (const auto& name : input.arg.value_names()) {
          if (name.empty()) continue;
          const auto state = state_of_placeholder_.find(name);
          if (state != state_of_placeholder_.end()) {
            if (const at::Tensor* t = archive_.tensor(state->second)) attribute(u, *t);
            continue;
          }
          auto& last = last_used_at[name];
          last = std::max(last, static_cast<int>(u));
        }
      }
      for (const auto& out : program.nodes[u].outputs) {
        for (const auto& name : out.value_names()) {
          if (!name.empty()) defined_at[name] = static_cast<int>(u);
        }
      }
    }
    for (const auto& out : program.outputs) {
      for (const auto& name : out.value_names()) {
        if (!name.empty()) last_used_at[name] = static_cast<int>(n);
      }
    }
    // State no unit reads travels with the root.
    if (n > 0) {
      for (const auto& [name, t] : archive_.weights) attribute(0, t);
    }

    std::vector<int64_t> delta(n + 1, 0);
    for (const auto& [name, from] : defined_at) {
      const auto last = last_used_at.find(name);
      if (last == last_used_at.end()) continue;
      const int to = std::min(last->second, static_cast<int>(n) - 1);
      const auto bytes = bytes_of.find(name);
      if (from >= to || bytes == bytes_of.end()) continue;
      delta[from] += bytes->second;
      delta[to] -= bytes->second;
    }
    for (const auto& [impl, span] : reader_span) {
      if (span.first >= span.second) continue;
      const auto bytes = static_cast<int64_t>(impl->numel() * impl->itemsize());
      delta[span.first] += bytes;
      delta[span.second] -= bytes;
    }
    profile.boundary_bytes.assign(n > 0 ? n - 1 : 0, 0);
    int64_t running = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      running += delta[i];
      profile.boundary_bytes[i] = running;
    }
    return profile;
  }

  std::vector<CutStage> cut(const std::vector<std::pair<size_t, size_t>>& ranges) const override {
    std::vector<CutStage> out;
    for (const auto& w : exported::wire_program_stages(archive_.program, units_, ranges)) {
      CutStage stage;
      stage.first_unit = w.first_unit;
      stage.end_unit = w.end_unit;
      stage.is_leaf = w.is_leaf;
      for (size_t i = 0; i < w.inputs.size(); ++i) {
        const auto& source = w.input_sources[i];
        stage.inputs.push_back({w.inputs[i], w.input_types[i], source.model_input, source.stage,
                                source.output});
      }
      for (size_t j = 0; j < w.outputs.size(); ++j) {
        stage.outputs.push_back({w.outputs[j], w.output_types[j], w.output_consumers[j]});
      }
      stage.held = w.state;
      std::sort(stage.held.begin(), stage.held.end());
      out.push_back(std::move(stage));
    }
    return out;
  }

  SavedStage save_stage(const std::vector<CutStage>& stages, size_t s,
                        const std::string& /*stage_name*/, const std::string& path) const override {
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto& stage : stages) ranges.emplace_back(stage.first_unit, stage.end_unit);
    const auto wiring = exported::wire_program_stages(archive_.program, units_, ranges);
    const auto& w = wiring.at(s);

    exported::Pt2Archive stage;
    stage.origin = path;
    stage.model_name = archive_.model_name;
    stage.model_json =
        exported::stage_model_json(archive_.model_json, archive_.program, w, path_);
    stage.program = exported::parse_exported_program(stage.model_json, path);
    SavedStage saved;
    std::unordered_set<const c10::TensorImpl*> counted;
    const std::set<std::string> held(w.state.begin(), w.state.end());
    for (const InputSpec& spec : archive_.program.input_specs) {
      if (!held.count(spec.target)) continue;
      const bool parameter = spec.kind == InputSpec::Kind::kParameter;
      // A non-persistent buffer travels in the stage but is in no state dict, as in PyTorch.
      const bool buffer = spec.kind == InputSpec::Kind::kBuffer && spec.persistent;
      if (const auto it = archive_.weights.find(spec.target); it != archive_.weights.end()) {
        stage.weights[spec.target] = it->second;
      } else if (const auto c = archive_.constants.find(spec.target);
                 c != archive_.constants.end()) {
        stage.constants[spec.target] = c->second;
      }
      if (parameter || buffer) saved.parameters.push_back(spec.target);
      if (parameter) {
        saved.trained_parameters.push_back(spec.target);
        const at::Tensor* t = archive_.tensor(spec.target);
        if (t && counted.insert(t->unsafeGetTensorImpl()).second) saved.parameter_count += t->numel();
      }
    }
    for (size_t u = w.first_unit; u < w.end_unit; ++u) {
      if (draws_random(archive_.program.nodes[u])) saved.draws_random_numbers = true;
    }
    exported::write_pt2_archive(stage, path);
    return saved;
  }

  std::map<std::string, std::string> canonical_names() const override {
    std::unordered_map<const c10::TensorImpl*, std::string> first_name_of;
    std::map<std::string, std::string> canonical;
    for (const auto& [name, t] : exported::state_dict(archive_)) {
      auto [it, fresh] = first_name_of.emplace(t.unsafeGetTensorImpl(), name);
      canonical[name] = it->second;
    }
    return canonical;
  }

  std::vector<std::string> state_names() const override {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : exported::state_dict(archive_)) names.push_back(name);
    return names;
  }

  std::vector<std::pair<std::string, at::Tensor>> named_state() const override {
    return exported::state_dict(archive_);
  }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const InputSpec& spec : archive_.program.input_specs) {
      if (spec.kind != InputSpec::Kind::kParameter) continue;
      if (const at::Tensor* t = archive_.tensor(spec.target)) out.emplace_back(spec.target, *t);
    }
    return out;
  }

 private:
  std::string path_;
  exported::Pt2Archive archive_;
  exported::ExportedModule module_;
  exported::ProgramUnits units_;
  std::vector<const InputSpec*> user_inputs_;
  std::unordered_map<std::string, std::string> state_of_placeholder_;  // placeholder -> fqn
  int64_t static_batch_ = 0;
};

}  // namespace

std::unique_ptr<CutModel> load_exported_cut_model(const std::string& path) {
  return std::make_unique<ExportedCutModel>(path);
}

}  // namespace ravnest::graph
