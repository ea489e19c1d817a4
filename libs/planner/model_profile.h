// ModelProfile: what the planner knows of a model, measured by libs/graph on one example
// batch. The model is a sequence of units (top-level compute nodes of its forward graph, in
// execution order); a stage is a contiguous range of units; a cut may sit after unit i only
// where cut_allowed[i].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::planner {

struct Unit {
  std::string label;               // e.g. "aten::conv2d layer1.0.conv1"
  double forward_seconds = 0;      // measured on the example batch
  int64_t parameter_bytes = 0;     // parameters and buffers first used by this unit
  int64_t trainable_bytes = 0;     // the part of parameter_bytes that receives gradients
  int64_t activation_bytes = 0;    // bytes of the outputs, kept for backward
  // Measured over modelled: what a probe of a stage holding this unit measured (above a daemon's
  // baseline) divided by what the cost model gave that stage (docs/planner.md#memory); 1 until
  // measured. Scales the unit's whole memory term.
  double memory_scale = 1.0;
};

struct ModelProfile {
  std::vector<Unit> units;
  std::vector<int64_t> boundary_bytes;  // size units-1: bytes crossing a cut after unit i
  std::vector<bool> cut_allowed;        // size units-1
  int64_t batch_size = 1;               // samples in the example batch
  int64_t input_bytes = 0;              // bytes of the model's inputs for that batch
  int64_t output_bytes = 0;             // bytes of the model's outputs for that batch

  int64_t total_parameter_bytes() const;
  int64_t total_trainable_bytes() const;
};

}  // namespace ravnest::planner
