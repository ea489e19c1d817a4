// The process's CPU random generator (dropout and every other random op on the CPU draw from
// it): its state, read and set under the generator's lock. A stage passes it along the chain of
// stages that draw (NodeMetadata::random_nodes), and a checkpoint keeps it.
#pragma once

#include <ATen/core/Tensor.h>

namespace ravnest::runtime {

at::Tensor cpu_random_state();
void set_cpu_random_state(const at::Tensor& state);

}  // namespace ravnest::runtime
