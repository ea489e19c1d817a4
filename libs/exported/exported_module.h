// ExportedModule: a model from torch.export (.pt2) run in C++ with autograd, as a pipeline stage
// needs it: forward on a list of inputs, backward through torch::autograd, parameters as leaf
// tensors under their original names, buffers mutated in place as eager PyTorch mutates them.
//
// How it runs: every node of the graph is resolved once at load against the c10 dispatcher
// (findSchema with the serialized target's name and overload) and its arguments fixed by the
// operator's schema (kwargs by name, defaults filled in); forward then calls each operator
// boxed, in graph order, with autograd as the caller has it (on by default), so that the same
// kernels, autograd formulas and random draws serve as in one eager process. Multi-output ops
// bind their outputs (what FX's getitem took apart), aten.sym_size.int and the integer
// arithmetic of a symbolic batch (_operator.mul, ...) are computed on the actual sizes: a batch
// other than the export's example runs if the archive marked it dynamic. PyTorch's own NativeRT
// (torch/nativert) runs archives the same way, for inference only.
//
// Training and eval: an export taken in training mode records batch_norm(training=True),
// dropout(train=True), lstm(train=True) and BatchNorm's num_batches_tracked.add_(1). After
// train(false) these run as model.eval() would: training/train false, the tracking add_ skipped,
// and scaled_dot_product_attention's dropout_p zero (attention code writes `dropout_p if
// self.training else 0`: nn.MultiheadAttention, nanoGPT, Hugging Face). An export taken in eval
// mode stays in eval mode (train(true) does not invent the training path).
//
// Threads: one at a time (forward mutates buffers); to() and train() between forwards.
// load() throws base::ConfigError, one line naming the file and the node at fault (an operator
// this LibTorch does not register, an argument kind or target not run, an unknown argument
// name); forward throws std::invalid_argument for inputs of the wrong count and what the kernels
// throw (c10::Error). On LibTorch 1.13 load() refuses every archive in one line naming that
// LibTorch and the 2.x build.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "libs/exported/pt2_archive.h"

namespace ravnest::exported {

class ExportedModule {
 public:
  // The archive at `path` (pt2_archive.h), every node resolved.
  static ExportedModule load(const std::string& path);
  static ExportedModule from_archive(Pt2Archive archive);

  ExportedModule(ExportedModule&&) noexcept;
  ExportedModule& operator=(ExportedModule&&) noexcept;
  ~ExportedModule();

  // The user outputs for the user inputs, both in the exported signature's order (tensors, or
  // None and numbers where the signature has them). A user input that is a SymInt (a stage cut
  // from a larger graph given the batch size computed upstream) takes an int, or a one-element
  // integer tensor, bound as the symbolic value; a SymInt output comes back as an int.
  std::vector<c10::IValue> forward(std::vector<c10::IValue> inputs);

  // forward, calling `observer` after each node (clusterize's profile of a model): the node's
  // index in the program's nodes, the wall-clock seconds (steady_clock) of its kernel call (on a
  // device, the device is synchronized before the first node and after each call, so the time is
  // the kernel's), and what the node returned. Nodes that call no operator (a symbolic size's
  // integer arithmetic, BatchNorm's step count skipped in eval) report the time of that work and
  // their value. forward itself observes nothing and pays nothing for this. The observer runs on
  // the caller's thread; what it throws ends the forward.
  using NodeObserver = std::function<void(size_t node_index, double seconds,
                                          const std::vector<c10::IValue>& node_outputs)>;
  std::vector<c10::IValue> forward_observed(std::vector<c10::IValue> inputs,
                                            const NodeObserver& observer);

  // An independent module: its own parameters (leaves requiring grad as before, no gradients),
  // buffers and constants, equal in value, on the same device, in the same mode. The plan of
  // nodes is shared in value (copied), not re-resolved.
  ExportedModule clone() const;

  // The module as an archive (pt2_writer.h writes it): the program text it was loaded from, and
  // its current weights and constants under their names as host tensors. On the CPU these share
  // storage with the module's own (a save writes them before the next step; clone() first to
  // keep a snapshot); a device's are copied. Parameters that require grad are leaves that do
  // (detached: gradients stay with the module); tied weights stay one tensor.
  Pt2Archive to_archive() const;

  // Parameters in the signature's order, a tensor shared under two names (tied weights) once,
  // under its first name, as torch.nn.Module.named_parameters gives them.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  // Buffers (persistent or not) in the signature's order.
  std::vector<std::pair<std::string, at::Tensor>> named_buffers() const;

  void train(bool on = true);
  bool is_training() const;
  // Parameters (still leaves, gradients dropped), buffers and constants moved to `device`, and
  // the nodes that make tensors on the module's device (arange(..., device=cpu)) make them there.
  void to(const c10::Device& device);

  // The user inputs' names ("x", "tokens") and the user outputs' count.
  const std::vector<std::string>& input_names() const;
  size_t output_count() const;
  // Whether the export was taken in training mode (some node runs differently in eval).
  bool has_training_behaviour() const;
  const std::string& origin() const;
  // The text of models/<name>.json the module was loaded from.
  const std::string& model_json() const;

 private:
  struct Impl;
  explicit ExportedModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ravnest::exported
