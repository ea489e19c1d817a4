#include "libs/graph/fuse.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <unordered_map>
#include <utility>

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Dict.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/base/atomic_file.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/pt2_writer.h"
#include "libs/stage/stage_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/torch_support/module_file.h"
#include "libs/torch_support/torch_load_file.h"
#include "libs/graph/stage_builder.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::graph {
namespace fs = std::filesystem;

namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string node_label(const config::NodeMetadata& meta) {
  return meta.name.empty() ? config::node_name(meta.node_id) : meta.name;
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
      return torch_support::load_module(stream, path, c10::Device(c10::kCPU));
    }
    return torch_support::load_module(path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    throw FuseError(what + ": cannot load TorchScript: " + torch_support::torch_message(e));
  }
}

struct Held {
  at::Tensor value;
  std::string node;  // the first holder
};

// The original model and its state dict, which the stages must add up to.
struct Original {
  torch::jit::Module model;               // TorchScript
  std::optional<exported::Pt2Archive> archive;  // or torch.export
  NamedTensors tensors;                   // the state dict, in order
  std::map<std::string, size_t> index_of;  // name -> position in `tensors`
  std::vector<size_t> canonical;          // tied names: the position of the tensor's first name
};

// What the stages hold together.
struct Gathered {
  std::map<std::string, Held> held;
  std::vector<std::string> seen_order;  // names in the order first met
  std::set<std::string> shared;         // names met on more than one stage
};

exported::Pt2Archive load_archive(const std::string& what, const std::string& path,
                                  const std::string* bytes) {
  try {
    return bytes ? exported::read_pt2_archive_bytes(*bytes, path) : exported::read_pt2_archive(path);
  } catch (const std::exception& e) {
    throw FuseError(what + ": cannot read the torch.export archive: " + e.what());
  }
}

Original load_original(const std::string& model_path) {
  Original o;
  stage::StageFormat format;
  try {
    format = stage::stage_format_of(model_path);
  } catch (const std::exception& e) {
    throw FuseError(e.what());
  }
  if (format == stage::StageFormat::kExported) {
    o.archive = load_archive(model_path, model_path, nullptr);
    o.tensors = exported::state_dict(*o.archive);
  } else {
    o.model = load_module(model_path, model_path, nullptr);
    o.tensors = graph::named_state(o.model);
  }
  for (size_t i = 0; i < o.tensors.size(); ++i) o.index_of.emplace(o.tensors[i].first, i);
  o.canonical.resize(o.tensors.size());
  std::unordered_map<const c10::TensorImpl*, size_t> first;
  for (size_t i = 0; i < o.tensors.size(); ++i) {
    o.canonical[i] = first.emplace(o.tensors[i].second.unsafeGetTensorImpl(), i).first->second;
  }
  return o;
}

// A stage's tensors, in the model's state-dict order (a stage's tree may be in another), after
// checking they are exactly the names its metadata lists. `what` names the stage in errors.
NamedTensors stage_tensors(const StageFile& stage, const std::string& what,
                           const Original& original) {
  const std::string* bytes = stage.bytes.empty() ? nullptr : &stage.bytes;
  NamedTensors tensors = original.archive
                             ? exported::state_dict(load_archive(what, stage.path, bytes))
                             : graph::named_state(load_module(what, stage.path, bytes));
  const auto& index_of = original.index_of;
  std::stable_sort(tensors.begin(), tensors.end(), [&](const auto& a, const auto& b) {
    auto ia = index_of.find(a.first), ib = index_of.find(b.first);
    const size_t x = ia == index_of.end() ? index_of.size() : ia->second;
    const size_t y = ib == index_of.end() ? index_of.size() : ib->second;
    return x < y;
  });

  if (!stage.only.empty()) {
    const std::set<std::string> wanted(stage.only.begin(), stage.only.end());
    NamedTensors kept;
    for (auto& entry : tensors) {
      if (wanted.count(entry.first)) kept.push_back(std::move(entry));
    }
    tensors = std::move(kept);
  }
  std::set<std::string> in_file;
  for (const auto& entry : tensors) in_file.insert(entry.first);
  const std::set<std::string> listed =
      stage.only.empty()
          ? std::set<std::string>(stage.metadata.parameters.begin(), stage.metadata.parameters.end())
          : std::set<std::string>(stage.only.begin(), stage.only.end());
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
  return tensors;
}

// Every stage's tensors; a name on several stages must have one shape and equal values.
Gathered gather(const std::vector<StageFile>& stages, const Original& original, double tolerance,
                FuseResult* result) {
  Gathered g;
  std::set<int> node_ids;
  for (const auto& stage : stages) {
    const std::string label = node_label(stage.metadata);
    if (!node_ids.insert(stage.metadata.node_id).second) {
      throw FuseError("fuse: " + label + " is given twice");
    }
    const std::string what = label + " (" + (stage.bytes.empty() ? stage.path : "stage bytes") + ")";
    for (const auto& [name, tensor] : stage_tensors(stage, what, original)) {
      auto [it, fresh] = g.held.emplace(name, Held{tensor, label});
      if (fresh) {
        g.seen_order.push_back(name);
        continue;
      }
      g.shared.insert(name);
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
      result->max_shared_difference = std::max(result->max_shared_difference, diff);
    }
  }
  return g;
}

// The union must be the model's state dict, exactly.
void check_union(const Original& original, const Gathered& g, const std::string& model_path) {
  std::vector<std::string> missing, unknown;
  for (const auto& [name, tensor] : original.tensors) {
    if (!g.held.count(name)) missing.push_back(name);
  }
  for (const auto& name : g.seen_order) {
    if (!original.index_of.count(name)) unknown.push_back(name);
  }
  if (missing.empty() && unknown.empty()) return;
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
void check_shapes_and_ties(const Original& original, const Gathered& g, double tolerance,
                           FuseResult* result) {
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    const auto& [name, tensor] = original.tensors[i];
    const Held& entry = g.held.at(name);
    if (entry.value.sizes() != tensor.sizes()) {
      throw FuseError("fuse: " + name + " on " + entry.node + " has shape " +
                      shape_text(entry.value) + ", the model's has " + shape_text(tensor));
    }
    if (original.canonical[i] != i) {
      const auto& target_name = original.tensors[original.canonical[i]].first;
      const Held& target = g.held.at(target_name);
      const double diff = max_difference(entry.value, target.value);
      if (!(diff <= tolerance)) {
        std::ostringstream message;
        message << "fuse: tied parameter " << name << " (" << entry.node << ") differs from "
                << target_name << " (" << target.node << "), largest difference " << diff
                << ", allowed " << tolerance;
        throw FuseError(message.str());
      }
      result->max_shared_difference = std::max(result->max_shared_difference, diff);
    }
  }
}

// The trained values in the model's order and dtypes; tied names hold the same tensor.
std::vector<at::Tensor> trained_values(const Original& original, const Gathered& g,
                                       FuseResult* result) {
  std::vector<at::Tensor> values(original.tensors.size());
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    if (original.canonical[i] == i) {
      values[i] = g.held.at(original.tensors[i].first)
                      .value.detach()
                      .to(original.tensors[i].second.scalar_type())
                      .contiguous();
      result->elements += values[i].numel();
    } else {
      values[i] = values[original.canonical[i]];
    }
  }
  return values;
}

// Hands what an std::ostream writes to an AtomicFileWriter. A failed write is kept (an ostream
// swallows what its buffer throws) and rethrown by the caller, naming the file.
class AtomicFileBuf final : public std::streambuf {
 public:
  explicit AtomicFileBuf(base::AtomicFileWriter& file) : file_(file) {}
  const std::string& error() const { return error_; }

 protected:
  std::streamsize xsputn(const char* bytes, std::streamsize size) override {
    if (!error_.empty()) return 0;
    try {
      file_.write(bytes, static_cast<size_t>(size));
    } catch (const std::exception& e) {
      error_ = e.what();
      return 0;
    }
    return size;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char byte = traits_type::to_char_type(c);
    return xsputn(&byte, 1) == 1 ? c : traits_type::eof();
  }

 private:
  base::AtomicFileWriter& file_;
  std::string error_;
};

// trained_state_dict.pt and model.pt, each atomically; paths into *result. Both stream into
// their files: a model of several GB is never serialized whole in memory (it was, twice, with
// the stream's own growth on top: a 4.2 GB model's fuse needed more than 11 GB).
void write_outputs(const std::string& out_dir, const c10::Dict<std::string, at::Tensor>& state,
                   Original& original, FuseResult* result) {
  torch::jit::Module& model = original.model;
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) throw FuseError(out_dir + ": cannot create: " + error.message());
  result->state_dict_path = (fs::path(out_dir) / kTrainedStateDictFile).string();
  result->model_path =
      (fs::path(out_dir) / (original.archive ? kFusedExportedFile : kFusedModelFile)).string();

  try {
    base::AtomicFileWriter file(result->state_dict_path);
    torch_support::write_torch_load_file(c10::IValue(state), [&](const void* bytes, size_t size) {
      file.write(bytes, size);
    });
    file.commit();
  } catch (const std::exception& e) {
    throw FuseError(std::string("fuse: ") + e.what());
  }
  if (original.archive) {
    try {
      exported::write_pt2_archive(*original.archive, result->model_path);
    } catch (const std::exception& e) {
      throw FuseError(result->model_path + ": cannot save the model: " + e.what());
    }
    return;
  }
  try {
    base::AtomicFileWriter file(result->model_path);
    AtomicFileBuf buffer(file);
    std::ostream out(&buffer);
    try {
      model.save(out);
    } catch (const std::exception& e) {
      if (!buffer.error().empty()) throw std::runtime_error(buffer.error());
      throw FuseError(result->model_path + ": cannot save the model: " + torch_support::torch_message(e));
    }
    if (!buffer.error().empty()) throw std::runtime_error(buffer.error());
    file.commit();
  } catch (const FuseError&) {
    throw;
  } catch (const std::exception& e) {
    throw FuseError(std::string("fuse: ") + e.what());
  }
}

}  // namespace

FuseResult fuse_stages(const std::string& model_path, const std::vector<StageFile>& stages,
                       const std::string& out_dir, double tolerance) {
  if (stages.empty()) throw FuseError("fuse: no stage given");
  Original original = load_original(model_path);
  FuseResult result;
  const Gathered gathered = gather(stages, original, tolerance, &result);
  check_union(original, gathered, model_path);
  check_shapes_and_ties(original, gathered, tolerance, &result);

  const std::vector<at::Tensor> values = trained_values(original, gathered, &result);
  c10::Dict<std::string, at::Tensor> state;
  for (size_t i = 0; i < values.size(); ++i) state.insert(original.tensors[i].first, values[i]);
  // The model with the trained values copied into its own tensors (tied ones stay one tensor).
  {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < values.size(); ++i) {
      if (original.canonical[i] == i) original.tensors[i].second.copy_(values[i]);
    }
  }
  write_outputs(out_dir, state, original, &result);
  result.tensors = original.tensors.size();
  result.shared_names = gathered.shared.size();
  return result;
}

std::vector<StageFile> server_shards(std::vector<StageFile> stages) {
  for (auto& stage : stages) {
    if (stage.metadata.role == config::Role::kWorker && stage.metadata.parameter_server.hybrid()) {
      stage.only = stage.metadata.parameters;  // the dense part; its tables are placeholders
      continue;
    }
    for (const auto& server : stage.metadata.parameter_server.servers) {
      if (server.node == stage.metadata.node_id) stage.only = server.tensors;
    }
    if (stage.only.empty()) {
      throw FuseError("fuse: " + node_label(stage.metadata) + " serves no shard in the plan");
    }
  }
  return stages;
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

}  // namespace ravnest::graph
