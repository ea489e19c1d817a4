// OutputTree: how a program's user outputs nest, as the Python function returned them: a tensor,
// a tuple, a list or a dict of them, at any depth. torch.export flattens outputs into a list and
// keeps their structure as a pytree TreeSpec (models/<name>.json: module_call_graph's root entry,
// signature.out_spec, a JSON text "[1, {type, context, children_spec}]"); a stage rebuilds it so
// that it returns what eager PyTorch returns (a model's `{"out": ..., "aux": ...}` stays a dict,
// a one-element tuple stays a tuple).
//
// Pure C++; any thread. Reads strictly: a spec that is not a TreeSpec throws base::ConfigError,
// one line naming `origin`.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ravnest::exported {

struct OutputTree {
  // kLeaf: one output; kTuple also stands for a namedtuple's or a dataclass's fields.
  enum class Kind { kLeaf, kTuple, kList, kDict };
  Kind kind = Kind::kLeaf;
  std::vector<std::string> keys;  // kDict: the keys, in order (as strings)
  std::vector<OutputTree> children;

  // The outputs it takes, in order.
  size_t leaves() const;
};

// The root module's out_spec of `model_json`; when the archive has none (an old archive, a
// program without a module call graph): one leaf for one output, else a tuple of `outputs`.
OutputTree root_output_tree(const std::string& model_json, size_t outputs,
                            const std::string& origin);

}  // namespace ravnest::exported
