#include "libs/graph/cut_model.h"

#include "libs/graph/model_graph.h"

namespace ravnest::graph {

std::unique_ptr<CutModel> load_cut_model(const std::string& path) {
  return ModelGraph::load(path);
}

}  // namespace ravnest::graph
