// Which stages draw random numbers. A stage whose forward in training mode can draw from the
// generator (dropout, bernoulli, rand*, ...) takes part in the cluster's random stream: with two
// or more such stages, the daemons pass the generator's state from one to the next with each
// micro-batch, so that the stream runs stage after stage as in one process (see
// config::NodeMetadata::random_nodes and docs/job-file.md).
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace ravnest::graph {

// True when the module's forward (with every method it calls inlined) contains a node that draws
// random numbers in training mode (torch::jit::Node::isNondeterministic). A dropout whose
// probability is the constant 0 does not count. Conservative: a draw under a branch counts.
bool draws_random_numbers(const torch::jit::Module& module);

}  // namespace ravnest::graph
