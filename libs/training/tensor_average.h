// The average of copies of one tensor, as data parallelism makes it: the sum in the copies'
// order, then one division; integer tensors (BatchNorm's num_batches_tracked) by floor division
// of the exact sum, so they stay integers. And of copies of lists of tensors, as the reference
// trainer averages a ring's members (in their order, or chunk by chunk as the ring adds).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::training {

// A new tensor; `copies` must not be empty and agree in shape and dtype.
at::Tensor average_of(const std::vector<at::Tensor>& copies);

// In place: each tensor t of every copy (per_copy[c][t]) becomes average_of over the copies.
// The copies list the same tensors in the same order.
void average_across(const std::vector<std::vector<at::Tensor>>& per_copy);

// In place: what the daemons' ring all-reduce (libs/ring/ring_allreduce.h) computes, to the bit,
// with the copies as the ring's members in position order: the tensors grouped by dtype, each
// group flattened in order and cut into one chunk per copy (the first count % n chunks one
// element longer); chunk c summed in ring order from copy c on, ((x_c + x_c+1) + ...) + x_c-1,
// then divided by n (floating: one division per element; integers: floor division of the exact
// sum). Floating addition is not associative: with three copies or more, summing every chunk
// from copy 0 (average_across) differs in the last bit, which long runs of some models
// (BatchNorm, max-pooling, dropout) grow to 1e-3. float and double are modelled; other floating
// types are averaged as average_across does.
void ring_average(const std::vector<std::vector<at::Tensor>>& per_copy);

}  // namespace ravnest::training
