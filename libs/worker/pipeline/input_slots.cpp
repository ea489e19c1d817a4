#include "libs/worker/pipeline/input_slots.h"

#include <stdexcept>
#include <string>

namespace ravnest::worker {

InputSlots::InputSlots(const config::NodeMetadata& node) {
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const auto& input = node.inputs[i];
    if (input.from_node) slots_[{*input.from_node, static_cast<uint32_t>(input.from_output)}] = i;
  }
}

size_t InputSlots::of(int from, uint32_t output) const {
  auto slot = slots_.find({from, output});
  if (slot == slots_.end()) {
    throw std::runtime_error("node " + std::to_string(from) + " sent output " +
                             std::to_string(output) + " which this stage does not take");
  }
  return slot->second;
}

}  // namespace ravnest::worker
