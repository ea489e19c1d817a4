// Pt2Archive: a torch.export archive (.pt2, what torch.export.save writes) read in C++, no
// Python: its program (models/<name>.json, exported_program.h) and its tensors (the raw weight
// and constant files of data/, with the layout their payload configs give).
//
// The archive is a zip that LibTorch's PyTorchStreamReader reads ("<root>/models/model.json",
// "<root>/data/weights/model_weights_config.json", "<root>/data/weights/weight_0", ...).
// Entries of a payload config that view the same file with the same layout are one tensor (tied
// weights: torch.export.save writes the bytes once, and the signature names both).
//
// Any thread; reads the whole file; holds nothing after it returns. Every refusal is a
// base::ConfigError, one line naming the file and what is wrong: not a zip or truncated, not a
// torch.export archive, a schema too new, a weight file of the wrong size, a pickled (tensor
// subclass) weight. On LibTorch 1.13 every archive is refused in one line naming that LibTorch
// and the 2.x build.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/exported/exported_program.h"

namespace ravnest::exported {

struct Pt2Archive {
  std::string origin;      // the file's name, as messages give it
  std::string model_name;  // "model": models/<model_name>.json
  // The text of models/<model_name>.json as read; `program` is what it says. A writer
  // (pt2_writer.h) writes this text, not `program`: edit both together.
  std::string model_json;
  ExportedProgram program;
  // Fully qualified name -> tensor on the CPU, for weights (parameters and persistent buffers)
  // and constants (lifted tensor constants, non-persistent buffers). Parameters whose meta says so
  // require grad (leaves); nothing else does.
  std::map<std::string, at::Tensor> weights;
  std::map<std::string, at::Tensor> constants;

  // The tensor of a fully qualified name, a weight or a constant; nullptr for neither.
  const at::Tensor* tensor(const std::string& name) const {
    if (const auto it = weights.find(name); it != weights.end()) return &it->second;
    if (const auto it = constants.find(name); it != constants.end()) return &it->second;
    return nullptr;
  }
};

// The archive's state dict as PyTorch's would hold it: parameters and persistent buffers under
// their names, in the exported signature's order; tied names share a tensor. Pure lookup: any
// thread, both builds.
inline std::vector<std::pair<std::string, at::Tensor>> state_dict(const Pt2Archive& archive) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& spec : archive.program.input_specs) {
    using Kind = InputSpec::Kind;
    if (spec.kind != Kind::kParameter && !(spec.kind == Kind::kBuffer && spec.persistent)) continue;
    if (const at::Tensor* t = archive.tensor(spec.target)) out.emplace_back(spec.target, *t);
  }
  return out;
}

// The archive at `path`, named `path` in messages.
Pt2Archive read_pt2_archive(const std::string& path);
// The archive held in `bytes`, named `origin` in messages (tests, the fuzz target).
Pt2Archive read_pt2_archive_bytes(const std::string& bytes, const std::string& origin);

}  // namespace ravnest::exported
