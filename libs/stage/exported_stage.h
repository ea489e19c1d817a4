// ExportedStage: a Stage (stage.h) that is a model from torch.export (.pt2, issue 42), run by
// libs/exported's ExportedModule with autograd through the dispatcher. The module is owned by the
// stage: copies of the shared_ptr share it, deepcopy() clones it.
//
// forward returns what the exported function returned, its structure rebuilt from the archive's
// out_spec (output_tree.h): a tensor, a tuple, a list or a dict (string keys) of them, as eager
// PyTorch returns it; a stage cut from a bigger program (exported_cut.h) returns a tuple of its
// outputs, one or several, as a TorchScript stage does. Without an out_spec: the one output
// itself, or a tuple of several. Parameters and
// buffers carry their state-dict names ("layer1.0.conv1.weight"); a tied weight is one parameter
// under its first name. save() writes the stage's current state as a .pt2 (pt2_writer.h:
// atomically, host tensors) that load_stage, load_exported_stage and torch.export.load read.
//
// Threads as Stage's. On LibTorch 1.13 load_exported_stage refuses every archive in one line
// naming that LibTorch and the 2.x build.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "libs/exported/exported_module.h"
#include "libs/exported/output_tree.h"
#include "libs/stage/stage.h"

namespace ravnest::stage {

class ExportedStage final : public Stage {
 public:
  explicit ExportedStage(exported::ExportedModule module);
  // A module whose outputs nest as `outputs` (a deep copy: the archive's spec read once).
  ExportedStage(exported::ExportedModule module, exported::OutputTree outputs)
      : module_(std::move(module)), outputs_(std::move(outputs)) {}

  c10::IValue forward(std::vector<c10::IValue> inputs) override;
  std::vector<NamedTensor> named_parameters() const override;
  std::vector<NamedTensor> named_buffers() const override;
  void train(bool on) override { module_.train(on); }
  bool is_training() const override { return module_.is_training(); }
  void to(c10::Device device) override { module_.to(device); }
  std::shared_ptr<Stage> deepcopy() const override;
  // exported::write_pt2_archive of module().to_archive(); throws std::runtime_error (a
  // base::ConfigError for what cannot be written) naming the file.
  void save(const std::string& path) const override;
  std::string format() const override { return "torch.export"; }

  // What only an exported stage has: the module (per-node profiling, its archive, its inputs'
  // names).
  exported::ExportedModule& module() { return module_; }
  const exported::ExportedModule& module() const { return module_; }

 private:
  exported::ExportedModule module_;
  exported::OutputTree outputs_;
};

// exported::ExportedModule::load(path), moved to `device` when given, as a Stage. Throws
// base::ConfigError naming the file.
std::shared_ptr<ExportedStage> load_exported_stage(const std::string& path,
                                                   std::optional<c10::Device> device = std::nullopt);

}  // namespace ravnest::stage
