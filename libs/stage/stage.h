// Stage: what a node trains, whatever format the model came in. One interface, two
// implementations: TorchScriptStage (torchscript_stage.h, a torch::jit::Module; the legacy input)
// and ExportedStage (exported_stage.h, torch.export's .pt2 on LibTorch 2.x, issue 42); load_stage
// (stage_file.h) loads a file of either as its content says. The
// pipeline, the rings, the parameter servers, the predictor and the checkpoints hold a Stage and
// do not learn which one they run.
//
// A Stage is a handle to one model object: copies of the shared_ptr share parameters, buffers and
// the training flag (as copies of a torch::jit::Module do); deepcopy() makes an independent one.
// Not thread-safe: the node's compute thread owns it (the worker's contract), except that
// parameters may be read by a ring's threads while the compute thread waits for them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

namespace ravnest::stage {

// A parameter or buffer under its state-dict name ("layer1.0.conv1.weight").
struct NamedTensor {
  std::string name;
  at::Tensor value;
};

class Stage {
 public:
  virtual ~Stage() = default;

  // Runs the stage's forward on the caller's thread under the caller's grad mode, autocast and
  // device guards. Inputs are what the wiring of the plan gives this stage (node metadata's
  // inputs, in order); the result is what the stage returns (a tuple for several outputs, the
  // model's output at the leaf). Throws what the model throws (c10::Error, std::runtime_error).
  virtual c10::IValue forward(std::vector<c10::IValue> inputs) = 0;

  // Parameters and buffers with their state-dict names, in Python's state_dict order. The
  // tensors are the stage's own (not copies): an optimizer, a ring or a checkpoint works on them.
  virtual std::vector<NamedTensor> named_parameters() const = 0;
  virtual std::vector<NamedTensor> named_buffers() const = 0;
  std::vector<at::Tensor> parameters() const;
  std::vector<at::Tensor> buffers() const;

  // Training or evaluation mode, as nn.Module.train()/eval(): dropout and BatchNorm follow it.
  virtual void train(bool on) = 0;
  void eval() { train(false); }
  virtual bool is_training() const = 0;

  // Moves parameters and buffers to `device` in place (before an optimizer takes them).
  virtual void to(c10::Device device) = 0;

  // An independent copy: its own parameters and buffers, equal in value, same mode. Called under
  // torch::NoGradGuard by the weight stash, so the copies are leaves.
  virtual std::shared_ptr<Stage> deepcopy() const = 0;

  // Writes the stage (its current weights) to `path` in its own format, atomically: a reader
  // never sees half a file. Tensors are written as host tensors. Throws std::runtime_error naming
  // the file.
  virtual void save(const std::string& path) const = 0;

  // "TorchScript" or "torch.export", for messages and logs.
  virtual std::string format() const = 0;
};

}  // namespace ravnest::stage
