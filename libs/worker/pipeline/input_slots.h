// InputSlots: which of a stage's inputs each producer's output fills (NodeMetadata::inputs:
// from_node, from_output), for the stages that take activations: StageWorker and
// StagePredictor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::worker {

class InputSlots {
 public:
  explicit InputSlots(const config::NodeMetadata& node);

  // The input that output `output` of node `from` fills. Throws std::runtime_error naming both
  // when the stage takes no such output.
  size_t of(int from, uint32_t output) const;

 private:
  std::map<std::pair<int, uint32_t>, size_t> slots_;  // (node, output) -> input index
};

}  // namespace ravnest::worker
