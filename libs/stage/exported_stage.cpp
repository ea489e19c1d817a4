#include "libs/stage/exported_stage.h"

#include <ATen/core/ivalue.h>

#include "libs/exported/pt2_writer.h"

namespace ravnest::stage {

c10::IValue ExportedStage::forward(std::vector<c10::IValue> inputs) {
  std::vector<c10::IValue> outputs = module_.forward(std::move(inputs));
  if (outputs.size() == 1) return std::move(outputs[0]);
  return c10::ivalue::Tuple::create(std::move(outputs));
}

std::vector<NamedTensor> ExportedStage::named_parameters() const {
  std::vector<NamedTensor> out;
  for (auto& [name, value] : module_.named_parameters()) out.push_back({name, value});
  return out;
}

std::vector<NamedTensor> ExportedStage::named_buffers() const {
  std::vector<NamedTensor> out;
  for (auto& [name, value] : module_.named_buffers()) out.push_back({name, value});
  return out;
}

std::shared_ptr<Stage> ExportedStage::deepcopy() const {
  return std::make_shared<ExportedStage>(module_.clone());
}

void ExportedStage::save(const std::string& path) const {
  exported::write_pt2_archive(module_.to_archive(), path);
}

std::shared_ptr<ExportedStage> load_exported_stage(const std::string& path,
                                                   std::optional<c10::Device> device) {
  exported::ExportedModule module = exported::ExportedModule::load(path);
  if (device) module.to(*device);
  return std::make_shared<ExportedStage>(std::move(module));
}

}  // namespace ravnest::stage
