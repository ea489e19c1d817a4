// The device a daemon's stages compute on: the daemon config's `device` ("cpu", "cuda",
// "cuda:N"). Everything a stage worker is given (its module, the inputs and labels it reads or
// receives, the gradients that come back) goes there; what leaves the node goes through the
// host (wire_form copies a device tensor to the CPU, rings reduce host copies), so the same
// code runs on a CUDA build of LibTorch. Debian's LibTorch is CPU-only: asking it for CUDA is
// an error when the daemon starts.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "libs/daemon/worker_port.h"

namespace ravnest::runtime {

// The device `name` means on this machine. Throws std::runtime_error (one line) for a name
// parse_device refuses, a CUDA device when this LibTorch has no CUDA or the machine no GPU,
// or an index past the machine's CUDA devices.
c10::Device compute_device(const std::string& name);

// `value` with every tensor in it (also in tuples and lists) on `device`; no copy for a tensor
// already there.
c10::IValue to_device(const c10::IValue& value, const c10::Device& device);

// Runs `reduce` (a WorkerPort::reduce_rings call) on host copies of `work`'s tensors when they
// live on another device, and copies the results back; on the CPU, on the tensors themselves.
void reduce_on_host(std::vector<WorkerPort::RingWork>& work,
                    const std::function<void(std::vector<WorkerPort::RingWork>&)>& reduce);

}  // namespace ravnest::runtime
