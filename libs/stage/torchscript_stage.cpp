#include "libs/stage/torchscript_stage.h"

#include "libs/torch_support/module_file.h"

namespace ravnest::stage {

c10::IValue TorchScriptStage::forward(std::vector<c10::IValue> inputs) {
  return module_.forward(std::move(inputs));
}

std::vector<NamedTensor> TorchScriptStage::named_parameters() const {
  std::vector<NamedTensor> out;
  for (const auto& p : module_.named_parameters()) out.push_back({p.name, p.value});
  return out;
}

std::vector<NamedTensor> TorchScriptStage::named_buffers() const {
  std::vector<NamedTensor> out;
  for (const auto& b : module_.named_buffers()) out.push_back({b.name, b.value});
  return out;
}

std::shared_ptr<Stage> TorchScriptStage::deepcopy() const {
  return std::make_shared<TorchScriptStage>(module_.deepcopy());
}

void TorchScriptStage::save(const std::string& path) const {
  torch_support::save_module_atomically(module_, path);
}

std::shared_ptr<TorchScriptStage> load_torchscript_stage(const std::string& path,
                                                         std::optional<c10::Device> device) {
  return std::make_shared<TorchScriptStage>(torch_support::load_module(path, device));
}

torch::jit::Module* torchscript_module(Stage& stage) {
  auto* script = dynamic_cast<TorchScriptStage*>(&stage);
  return script ? &script->module() : nullptr;
}

}  // namespace ravnest::stage
