// ExportedCutModel: a torch.export archive (.pt2) as clusterize cuts it (cut_model.h). Units are
// the program's nodes (libs/exported/exported_cut.h says where a cut may sit and wires the
// stages); the profile runs the archive once node by node with ExportedModule (libs/exported);
// each stage is written as a .pt2 archive of the same schema holding its nodes, its parameters,
// buffers and constants under their original names, and its inputs and outputs as the stage's
// user inputs and outputs, which torch.export.load reads in Python.
//
// What cannot be trained is refused at load or at profile, in one line naming the file and the
// node: an operator this LibTorch does not register, a higher-order op, an archive of a newer
// schema (ExportedModule::load); a model input that is not a tensor; on LibTorch 1.13, every
// archive. A static batch dimension (an export without a batch Dim in dynamic_shapes) is
// static_batch(): clusterize refuses what would change it.
#pragma once

#include <memory>
#include <string>

#include "libs/graph/cut_model.h"

namespace ravnest::graph {

// The archive at `path`, every node resolved.
std::unique_ptr<CutModel> load_exported_cut_model(const std::string& path);

}  // namespace ravnest::graph
