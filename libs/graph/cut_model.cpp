#include "libs/graph/cut_model.h"

#include "libs/graph/exported_cut_model.h"
#include "libs/graph/model_graph.h"
#include "libs/stage/stage_file.h"

namespace ravnest::graph {

std::unique_ptr<CutModel> load_cut_model(const std::string& path) {
  bool exported = false;
  try {
    exported = stage::stage_format_of(path) == stage::StageFormat::kExported;
  } catch (const std::exception&) {
    // Neither format: TorchScript's loader says why in its own words (a missing file, no zip).
  }
  if (exported) return load_exported_cut_model(path);
  return ModelGraph::load(path);
}

}  // namespace ravnest::graph
