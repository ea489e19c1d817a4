// The average of copies of one tensor, as data parallelism makes it: the sum in the copies'
// order, then one division; integer tensors (BatchNorm's num_batches_tracked) by floor division
// of the exact sum, so they stay integers.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::training {

// A new tensor; `copies` must not be empty and agree in shape and dtype.
at::Tensor average_of(const std::vector<at::Tensor>& copies);

}  // namespace ravnest::training
