#include "libs/runtime/fuse.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Dict.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/atomic_file.h"
#include "libs/config/plan_layout.h"
#include "libs/graph/stage_builder.h"
#include "libs/graph/torch_errors.h"

namespace ravnest::runtime {
namespace fs = std::filesystem;

namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string node_label(const config::NodeMetadata& meta) {
  return meta.name.empty() ? "node_" + std::to_string(meta.node_id) : meta.name;
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// Up to 5 names, then how many more.
std::string some_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 5) out += ", ... (" + std::to_string(names.size() - 5) + " more)";
  return out;
}

// Largest absolute difference; NaN when either holds a NaN where the other does not match.
double max_difference(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0;
  const at::Tensor x = a.detach().to(at::kDouble);
  const at::Tensor y = b.detach().to(at::kDouble);
  if (at::equal(x, y)) return 0;  // also covers infinities in the same places
  return (x - y).abs().max().item<double>();
}

torch::jit::Module load_module(const std::string& what, const std::string& path,
                               const std::string* bytes) {
  try {
    if (bytes) {
      std::istringstream stream(*bytes);
      return torch::jit::load(stream, c10::Device(c10::kCPU));
    }
    return torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    throw FuseError(what + ": cannot load TorchScript: " + graph::torch_message(e));
  }
}

struct Held {
  at::Tensor value;
  std::string node;  // the first holder
};

}  // namespace

FuseResult fuse_stages(const std::string& model_path, const std::vector<StageFile>& stages,
                       const std::string& out_dir, double tolerance) {
  if (stages.empty()) throw FuseError("fuse: no stage given");
  torch::jit::Module model = load_module(model_path, model_path, nullptr);
  const NamedTensors original = graph::named_state(model);
  std::map<std::string, size_t> index_of;  // original name -> position
  for (size_t i = 0; i < original.size(); ++i) index_of.emplace(original[i].first, i);
  // Tied names: the first name of each tensor in the state dict.
  std::vector<size_t> canonical(original.size());
  {
    std::unordered_map<const c10::TensorImpl*, size_t> first;
    for (size_t i = 0; i < original.size(); ++i) {
      canonical[i] = first.emplace(original[i].second.unsafeGetTensorImpl(), i).first->second;
    }
  }

  // Gather every stage's tensors; names on several stages must agree.
  FuseResult result;
  std::map<std::string, Held> held;
  std::vector<std::string> seen_order;  // names in the order first met
  std::set<int> node_ids;
  std::set<std::string> shared;
  for (const auto& stage : stages) {
    const std::string label = node_label(stage.metadata);
    if (!node_ids.insert(stage.metadata.node_id).second) {
      throw FuseError("fuse: " + label + " is given twice");
    }
    const std::string what = label + " (" + (stage.bytes.empty() ? stage.path : "stage bytes") + ")";
    torch::jit::Module module =
        load_module(what, stage.path, stage.bytes.empty() ? nullptr : &stage.bytes);
    NamedTensors tensors = graph::named_state(module);
    // Checked and reported in the model's state-dict order (a stage's tree may be in another).
    std::stable_sort(tensors.begin(), tensors.end(), [&](const auto& a, const auto& b) {
      auto ia = index_of.find(a.first), ib = index_of.find(b.first);
      const size_t x = ia == index_of.end() ? index_of.size() : ia->second;
      const size_t y = ib == index_of.end() ? index_of.size() : ib->second;
      return x < y;
    });

    std::set<std::string> in_file;
    for (const auto& entry : tensors) in_file.insert(entry.first);
    const std::set<std::string> listed(stage.metadata.parameters.begin(),
                                       stage.metadata.parameters.end());
    std::vector<std::string> unlisted, absent;
    std::set_difference(in_file.begin(), in_file.end(), listed.begin(), listed.end(),
                        std::back_inserter(unlisted));
    std::set_difference(listed.begin(), listed.end(), in_file.begin(), in_file.end(),
                        std::back_inserter(absent));
    if (!unlisted.empty()) {
      throw FuseError("fuse: " + what + " holds " + std::to_string(unlisted.size()) +
                      " name(s) its metadata does not list: " + some_names(unlisted));
    }
    if (!absent.empty()) {
      throw FuseError("fuse: " + what + " lacks " + std::to_string(absent.size()) +
                      " name(s) its metadata lists: " + some_names(absent));
    }

    for (const auto& [name, tensor] : tensors) {
      auto [it, fresh] = held.emplace(name, Held{tensor, label});
      if (fresh) {
        seen_order.push_back(name);
        continue;
      }
      shared.insert(name);
      const at::Tensor& first = it->second.value;
      if (first.sizes() != tensor.sizes()) {
        throw FuseError("fuse: shared parameter " + name + " has shape " + shape_text(first) +
                        " on " + it->second.node + " but " + shape_text(tensor) + " on " + label);
      }
      const double diff = max_difference(first, tensor);
      if (!(diff <= tolerance)) {
        std::ostringstream message;
        message << "fuse: shared parameter " << name << " differs between " << it->second.node
                << " and " << label << " (largest difference " << diff << ", allowed "
                << tolerance << "): their gradients were not summed, or one copy was not updated";
        throw FuseError(message.str());
      }
      result.max_shared_difference = std::max(result.max_shared_difference, diff);
    }
  }

  // The union must be the model's state dict, exactly.
  std::vector<std::string> missing, unknown;
  for (const auto& [name, tensor] : original) {
    if (!held.count(name)) missing.push_back(name);
  }
  for (const auto& name : seen_order) {
    if (!index_of.count(name)) unknown.push_back(name);
  }
  if (!missing.empty() || !unknown.empty()) {
    std::string message = "fuse: the stages do not match " + model_path + "'s state dict:";
    if (!missing.empty()) {
      message += " " + std::to_string(missing.size()) + " name(s) on no stage (" +
                 some_names(missing) + ")";
    }
    if (!unknown.empty()) {
      message += std::string(missing.empty() ? "" : ";") + " " + std::to_string(unknown.size()) +
                 " name(s) the model does not have (" + some_names(unknown) + ")";
    }
    throw FuseError(message + "; are these all the stages of one cluster of this model's plan?");
  }

  // Shapes as in the model; tied names agree with the name they are tied to.
  for (size_t i = 0; i < original.size(); ++i) {
    const auto& [name, tensor] = original[i];
    const Held& entry = held.at(name);
    if (entry.value.sizes() != tensor.sizes()) {
      throw FuseError("fuse: " + name + " on " + entry.node + " has shape " +
                      shape_text(entry.value) + ", the model's has " + shape_text(tensor));
    }
    if (canonical[i] != i) {
      const auto& target_name = original[canonical[i]].first;
      const Held& target = held.at(target_name);
      const double diff = max_difference(entry.value, target.value);
      if (!(diff <= tolerance)) {
        std::ostringstream message;
        message << "fuse: tied parameter " << name << " (" << entry.node << ") differs from "
                << target_name << " (" << target.node << "), largest difference " << diff
                << ", allowed " << tolerance;
        throw FuseError(message.str());
      }
      result.max_shared_difference = std::max(result.max_shared_difference, diff);
    }
  }

  // The state dict, in the model's order; tied names hold the same tensor.
  c10::Dict<std::string, at::Tensor> state;
  std::vector<at::Tensor> values(original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    if (canonical[i] == i) {
      values[i] = held.at(original[i].first)
                      .value.detach()
                      .to(original[i].second.scalar_type())
                      .contiguous();
      result.elements += values[i].numel();
    } else {
      values[i] = values[canonical[i]];
    }
    state.insert(original[i].first, values[i]);
  }

  // The model with the trained values copied into its own tensors (tied ones stay one tensor).
  {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < original.size(); ++i) {
      if (canonical[i] == i) original[i].second.copy_(values[i]);
    }
  }

  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) throw FuseError(out_dir + ": cannot create: " + error.message());
  result.state_dict_path = (fs::path(out_dir) / kTrainedStateDictFile).string();
  result.model_path = (fs::path(out_dir) / kFusedModelFile).string();

  const std::vector<char> pickled = torch::jit::pickle_save(c10::IValue(state));
  std::ostringstream model_bytes;
  try {
    model.save(model_bytes);
  } catch (const std::exception& e) {
    throw FuseError(result.model_path + ": cannot save the model: " + graph::torch_message(e));
  }
  try {
    config::write_file_atomically(result.state_dict_path,
                                  std::string(pickled.begin(), pickled.end()));
    config::write_file_atomically(result.model_path, model_bytes.str());
  } catch (const std::exception& e) {
    throw FuseError(std::string("fuse: ") + e.what());
  }
  result.tensors = original.size();
  result.shared_names = shared.size();
  return result;
}

std::vector<StageFile> cluster_stage_files(const std::string& plan_dir, int cluster) {
  std::vector<StageFile> out;
  const config::PlanLayout layout(plan_dir);
  const std::string nodes = layout.nodes_dir();
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(nodes, error)) {
    if (!config::PlanLayout::is_node_file(entry.path().filename().string())) continue;
    StageFile stage;
    stage.metadata = config::load_node_metadata(entry.path().string());
    if (stage.metadata.cluster != cluster) continue;
    stage.path = layout.resolve(stage.metadata.stage_file);
    out.push_back(std::move(stage));
  }
  if (error) throw FuseError(nodes + ": cannot list: " + error.message());
  if (out.empty()) {
    throw FuseError(nodes + ": no node of cluster " + std::to_string(cluster));
  }
  std::sort(out.begin(), out.end(), [](const StageFile& a, const StageFile& b) {
    return a.metadata.position < b.metadata.position;
  });
  return out;
}

}  // namespace ravnest::runtime
