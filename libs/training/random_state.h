// The random generator a stage's random ops draw from: the CPU's for a stage on the CPU (dropout
// and every other random op there), the CUDA device's own for a stage on a GPU. Its state, read
// and set under the generator's lock. A stage passes it along the chain of stages that draw
// (NodeMetadata::random_nodes), and a checkpoint keeps it, so that the draws come in the order
// one process on the same device makes them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace ravnest::training {

// The state of `device`'s default generator (a CPU byte tensor, whatever the device).
at::Tensor random_state(const c10::Device& device);

// Sets `device`'s default generator to `state`, as read by random_state for the same kind of
// device. Throws c10::Error for a state of another kind (a CPU state on a CUDA generator).
void set_random_state(const c10::Device& device, const at::Tensor& state);

}  // namespace ravnest::training
