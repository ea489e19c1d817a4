// ExampleInput: the tensors a model is profiled and verified with, from command-line specs.
//   "64x1x8x8:float32"  random normal values of that shape (float32 when no dtype is given)
//   "64x11:int64"       random integers in [0, 10); "64x11:int64:100" draws them from [0, 100)
//   "batch.pt"          a tensor, or a list/tuple of tensors, saved with torch.save in Python
// Random values come from a generator seeded with `seed`, so a spec and a seed give one batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::graph {

// Throws std::invalid_argument "--example-input 'spec': ..." on a malformed spec.
std::vector<at::Tensor> make_example_inputs(const std::vector<std::string>& specs,
                                            uint64_t seed);

}  // namespace ravnest::graph
