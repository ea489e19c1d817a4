#include "libs/stage/exported_stage.h"

#include <ATen/core/ivalue.h>

#include "libs/exported/pt2_writer.h"

namespace ravnest::stage {

namespace {

// The outputs from `next` on, nested as `tree` says.
c10::IValue nest(const exported::OutputTree& tree, std::vector<c10::IValue>& outputs,
                 size_t& next) {
  using Kind = exported::OutputTree::Kind;
  if (tree.kind == Kind::kLeaf) return std::move(outputs.at(next++));
  std::vector<c10::IValue> items;
  for (const auto& child : tree.children) items.push_back(nest(child, outputs, next));
  if (tree.kind == Kind::kTuple) return c10::ivalue::Tuple::create(std::move(items));
  if (tree.kind == Kind::kList) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (auto& item : items) list.push_back(std::move(item));
    return list;
  }
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (size_t i = 0; i < items.size(); ++i) dict.insert(tree.keys[i], std::move(items[i]));
  return dict;
}

}  // namespace

ExportedStage::ExportedStage(exported::ExportedModule module)
    : module_(std::move(module)),
      outputs_(exported::root_output_tree(module_.model_json(), module_.output_count(),
                                          module_.origin())) {}

c10::IValue ExportedStage::forward(std::vector<c10::IValue> inputs) {
  std::vector<c10::IValue> outputs = module_.forward(std::move(inputs));
  size_t next = 0;
  return nest(outputs_, outputs, next);
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
  return std::make_shared<ExportedStage>(module_.clone(), outputs_);
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
