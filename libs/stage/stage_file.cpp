#include "libs/stage/stage_file.h"

#include <stdexcept>

#include <caffe2/serialize/inline_container.h>

#include "libs/stage/exported_stage.h"
#include "libs/stage/torchscript_stage.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::stage {
namespace {

[[noreturn]] void neither(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": neither a TorchScript model nor a torch.export archive (.pt2): " +
                           why);
}

}  // namespace

StageFormat stage_format_of_records(const std::vector<std::string>& records) {
  bool data = false, code = false, model = false;
  for (const std::string& record : records) {
    data = data || record == "data.pkl";
    code = code || record.rfind("code/", 0) == 0;
    model = model || (record.rfind("models/", 0) == 0 && record.size() > 12 &&
                      record.compare(record.size() - 5, 5, ".json") == 0 &&
                      record.find('/', 7) == std::string::npos);
  }
  if (model) return StageFormat::kExported;
  if (data && code) return StageFormat::kTorchScript;
  return StageFormat::kUnknown;
}

StageFormat stage_format_of(const std::string& path) {
  std::vector<std::string> records;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    records = reader.getAllRecords();
  } catch (const std::exception& e) {
    // The reader's first sentence ("... failed finding central directory"); the rest of its
    // message is advice about corrupted checkpoints.
    std::string why = torch_support::torch_message(e);
    why = why.substr(0, why.find(". "));
    neither(path, "not a zip archive PyTorch reads (" + why + ")");
  }
  const StageFormat format = stage_format_of_records(records);
  if (format == StageFormat::kUnknown) {
    neither(path, "a zip archive with no data.pkl and code/ (torch.jit.save) nor models/<name>.json "
                  "(torch.export.save): torch.save's file?");
  }
  return format;
}

std::shared_ptr<Stage> load_stage(const std::string& path, std::optional<c10::Device> device) {
  if (stage_format_of(path) == StageFormat::kExported) return load_exported_stage(path, device);
  return load_torchscript_stage(path, device);
}

}  // namespace ravnest::stage
