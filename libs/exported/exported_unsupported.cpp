// The LibTorch 1.13 build's archive reader and runtime: .pt2 archives need the 2.x build (the
// serialized operators, the reader's record layout and the autograd kernels they name are 2.x's).
#include <stdexcept>

#include "libs/base/config_error.h"
#include "libs/exported/exported_module.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/pt2_writer.h"
#include "libs/torch_support/torch_compat.h"

namespace ravnest::exported {
namespace {

[[noreturn]] void refuse(const std::string& origin) {
  throw base::ConfigError(origin + ": a torch.export archive (.pt2) needs ravnest built against "
                          "LibTorch 2.x (scripts/build --torch2); this build's is " +
                          torch_support::torch_description());
}

}  // namespace

struct ExportedModule::Impl {};

Pt2Archive read_pt2_archive(const std::string& path) { refuse(path); }
Pt2Archive read_pt2_archive_bytes(const std::string&, const std::string& origin) { refuse(origin); }
void write_pt2_archive(const Pt2Archive&, const std::string& path) { refuse(path); }
std::string write_pt2_archive_bytes(const Pt2Archive& archive) { refuse(archive.origin); }

ExportedModule::ExportedModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExportedModule::ExportedModule(ExportedModule&&) noexcept = default;
ExportedModule& ExportedModule::operator=(ExportedModule&&) noexcept = default;
ExportedModule::~ExportedModule() = default;
ExportedModule ExportedModule::load(const std::string& path) { refuse(path); }
ExportedModule ExportedModule::from_archive(Pt2Archive archive) { refuse(archive.origin); }
std::vector<c10::IValue> ExportedModule::forward(std::vector<c10::IValue>) { return {}; }
std::vector<c10::IValue> ExportedModule::forward_observed(std::vector<c10::IValue>,
                                                          const NodeObserver&) {
  return {};
}
ExportedModule ExportedModule::clone() const { return ExportedModule(std::make_unique<Impl>()); }
Pt2Archive ExportedModule::to_archive() const { return {}; }
std::vector<std::pair<std::string, at::Tensor>> ExportedModule::named_parameters() const { return {}; }
std::vector<std::pair<std::string, at::Tensor>> ExportedModule::named_buffers() const { return {}; }
void ExportedModule::train(bool) {}
bool ExportedModule::is_training() const { return false; }
void ExportedModule::to(const c10::Device&) {}
const std::vector<std::string>& ExportedModule::input_names() const {
  static const std::vector<std::string> none;
  return none;
}
size_t ExportedModule::output_count() const { return 0; }
bool ExportedModule::has_training_behaviour() const { return false; }
const std::string& ExportedModule::model_json() const { return origin(); }
const std::string& ExportedModule::origin() const {
  static const std::string none;
  return none;
}

}  // namespace ravnest::exported
