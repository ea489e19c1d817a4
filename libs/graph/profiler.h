// Profiler: runs a model's forward once unit by unit on an example batch and measures what the
// planner needs: each unit's compute time, the bytes of every value (so the bytes crossing any
// cut), and the parameter and buffer bytes each unit is the first to use. A cut between two
// units that read the same parameter also costs that parameter's bytes (its gradient is
// exchanged every step), so the planner avoids splitting a module's readers.
#pragma once

#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/graph/model_graph.h"
#include "libs/planner/model_profile.h"

namespace ravnest::graph {

struct ModelMeasurements {
  planner::ModelProfile profile;
  std::unordered_map<const torch::jit::Value*, int64_t> value_bytes;  // positioned values
};

// Runs on a deep copy of the module, so the model's buffers (BatchNorm statistics) are left as
// they were. Times are the fastest of `repeats` runs, the first one being a warm-up.
// Throws std::runtime_error "<model>: forward fails on the example input: <torch's message>".
ModelMeasurements profile_model(const ModelGraph& model, const std::vector<at::Tensor>& inputs,
                                int repeats = 3);

// Checks the number of inputs against forward's signature, and that every input is a tensor
// (Optional[Tensor] included); throws std::invalid_argument naming the model and the argument.
void check_forward_inputs(const ModelGraph& model, size_t given);

int64_t ivalue_bytes(const c10::IValue& value);

}  // namespace ravnest::graph
