// A stage's file, whatever its format: the format told from the file's content (not its name),
// and the Stage (stage.h) of that format loaded from it. What loads a node's stage or a whole
// model for evaluation calls load_stage; only what needs TorchScript itself (a hybrid plan's
// sparse tables) asks torchscript_module.
//
// Both are zip archives PyTorch writes, told apart by their records (without the archive's root
// folder): a TorchScript module (torch.jit.save) holds data.pkl and code/; a torch.export archive
// (torch.export.save, .pt2) holds models/<name>.json.
//
// Any thread; load_stage reads the whole file. Throws std::runtime_error, one line naming the
// file: neither format (a text file, torch.save's pickle), or what the format's loader refuses
// (torch_support::load_module's and exported::ExportedModule::load's messages). On LibTorch 1.13
// a .pt2 is refused in one line naming that LibTorch and the 2.x build.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "libs/stage/stage.h"

namespace ravnest::stage {

enum class StageFormat { kTorchScript, kExported, kUnknown };

// The format a zip archive's records (names without the root folder) say; pure.
StageFormat stage_format_of_records(const std::vector<std::string>& records);

// The format of the file at `path`, from its zip directory only. Throws std::runtime_error
// "PATH: neither a TorchScript model nor a torch.export archive (.pt2): ..." for a file that
// is no zip archive PyTorch reads, or one of neither format.
StageFormat stage_format_of(const std::string& path);

// The stage in `path`: TorchScriptStage or ExportedStage as its content says, moved to `device`
// when given.
std::shared_ptr<Stage> load_stage(const std::string& path,
                                  std::optional<c10::Device> device = std::nullopt);

}  // namespace ravnest::stage
