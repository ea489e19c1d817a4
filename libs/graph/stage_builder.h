// Stage building: a cluster's contiguous unit ranges become TorchScript modules, one per node.
//
// Wiring (pure, from the graph alone): the root takes every model input and passes on those that
// later stages need; every value a stage needs from an earlier one arrives directly from the stage
// that produced it (no relaying through the stages between); the leaf returns the model's output.
//
// A stage module holds only the parameters, buffers and attributes its units read, under their
// original names (layer1.0.conv1.weight), in a module tree pruned to those paths; every module of
// the tree keeps its `training` flag so train()/eval() reach BatchNorm and dropout as in the whole
// model. Its forward is the units' nodes with the free nodes they need re-created, constants
// folded, and each top-level if and loop saved as a function of its own (STAGE.forward_partN.run)
// so that loading costs memory in proportion to the stage, not to its square (stage_builder.cpp).
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "libs/graph/model_graph.h"

namespace ravnest::graph {

struct StageSource {
  int model_input = -1;  // root only
  int stage = -1;        // producer stage index within the cluster
  int output = -1;       // index into the producer's output tuple
};

struct StageWiring {
  size_t first_unit = 0;
  size_t end_unit = 0;
  bool is_leaf = false;
  std::vector<torch::jit::Value*> inputs;  // forward's arguments after self, in order
  std::vector<StageSource> input_sources;
  std::vector<torch::jit::Value*> outputs;  // non-leaf: the returned tuple, in order
  std::vector<std::vector<int>> output_consumers;  // stage indices per output
};

// `ranges` are consecutive [first, end) unit ranges covering every unit, in pipeline order.
std::vector<StageWiring> wire_stages(const ModelGraph& model,
                                     const std::vector<std::pair<size_t, size_t>>& ranges);

// Attribute paths a stage reads or writes: tensors and plain attributes, or whole submodules
// when the stage uses a submodule object itself.
std::set<AttributePath> stage_attribute_paths(const ModelGraph& model, const StageWiring& wiring);

// State-dict names of the model's parameters and buffers that none of `used` covers.
std::vector<AttributePath> uncovered_state(const ModelGraph& model,
                                           const std::set<AttributePath>& used);

// Builds the stage module. `extra_paths` are added to its tree (parameters no stage reads travel
// with the root so that the fused state dict is complete). Tensors are copied, so stages share no
// storage with the model or each other; tied tensors stay tied within a stage.
torch::jit::Module build_stage_module(const ModelGraph& model, const StageWiring& wiring,
                                      const std::string& stage_name,
                                      const std::set<AttributePath>& paths);

// A module's parameters and buffers with their state-dict names, in Python's state_dict order
// (per module: parameters, buffers, then children).
std::vector<std::pair<std::string, at::Tensor>> named_state(const torch::jit::Module& module);
std::vector<std::string> state_names(const torch::jit::Module& module);

}  // namespace ravnest::graph
