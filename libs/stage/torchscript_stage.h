// TorchScriptStage: a Stage (stage.h) that is a TorchScript module, the format clusterize cuts
// TorchScript models into (libs/graph/stage_builder.h). The module is shared, not copied: the
// stage and `module()` are one object.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <torch/csrc/jit/api/module.h>

#include "libs/stage/stage.h"

namespace ravnest::stage {

class TorchScriptStage final : public Stage {
 public:
  explicit TorchScriptStage(torch::jit::Module module) : module_(std::move(module)) {}

  c10::IValue forward(std::vector<c10::IValue> inputs) override;
  std::vector<NamedTensor> named_parameters() const override;
  std::vector<NamedTensor> named_buffers() const override;
  void train(bool on) override { module_.train(on); }
  bool is_training() const override { return module_.is_training(); }
  void to(c10::Device device) override { module_.to(device); }
  std::shared_ptr<Stage> deepcopy() const override;
  // torch_support::save_module_atomically.
  void save(const std::string& path) const override;
  std::string format() const override { return "TorchScript"; }

  // What only TorchScript has: attributes reached by name (a hybrid plan's sparse tables).
  torch::jit::Module& module() { return module_; }
  const torch::jit::Module& module() const { return module_; }

 private:
  torch::jit::Module module_;
};

// torch_support::load_module(path, device) as a Stage. Throws std::runtime_error naming the file.
std::shared_ptr<TorchScriptStage> load_torchscript_stage(
    const std::string& path, std::optional<c10::Device> device = std::nullopt);

// The TorchScript module behind `stage`, or nullptr when it is of another format. For the few
// places that need TorchScript itself (sparse tables found by attribute path); they refuse other
// formats in one line.
torch::jit::Module* torchscript_module(Stage& stage);

}  // namespace ravnest::stage
