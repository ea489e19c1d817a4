// The device a stage computes on, from its name in a daemon's config or on the command line
// ("cpu", "cuda", "cuda:N"): what a daemon's stages and clusterize's memory probes run on.
// Debian's LibTorch is CPU-only: asking it for CUDA is an error, said in one line.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace ravnest::training {

// The device `name` means on this machine. Throws std::runtime_error (one line) for a name
// parse_device refuses, a CUDA device when this LibTorch has no CUDA or the machine no GPU,
// or an index past the machine's CUDA devices.
c10::Device compute_device(const std::string& name);

}  // namespace ravnest::training
