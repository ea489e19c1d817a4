// The device a daemon's stages compute on: the daemon config's `device` ("cpu", "cuda",
// "cuda:N"). Everything a stage worker is given (its module, the inputs and labels it reads or
// receives, the gradients that come back) goes there; what leaves the node goes through the
// host (a training job's DeviceTransfers, device_transfers.h, copies through pinned memory on a
// stream of its own; elsewhere wire_form copies a device tensor to the CPU), so the same code
// runs on a CUDA build of LibTorch. The device itself comes from its name through
// compute_device (libs/training/training_device.h, which clusterize's probes use too): Debian's
// LibTorch is CPU-only, and asking it for CUDA is an error when the daemon starts. Also here: the process's CUDA settings for exactness
// (CUBLAS_WORKSPACE_CONFIG, a job's deterministic algorithms) and out-of-memory errors.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "libs/worker/worker_port.h"
#include "libs/training/training_device.h"

namespace ravnest::worker {

// `value` with `f` applied to every tensor in it (also in tuples, lists and dicts, rebuilt with
// their types); anything else as it is. `f` takes and returns an at::Tensor (undefined ones too).
template <typename F>
c10::IValue map_tensors(const c10::IValue& value, F& f) {
  if (value.isTensor()) return c10::IValue(f(value.toTensor()));
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& item : value.toTupleRef().elements()) items.push_back(map_tensors(item, f));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue item : list) out.push_back(map_tensors(item, f));
    return out;
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), map_tensors(entry.value(), f));
    return out;
  }
  return value;
}

// `value` with every tensor in it (also in tuples, lists and dicts) on `device`; no copy for a
// tensor already there.
c10::IValue to_device(const c10::IValue& value, const c10::Device& device);

// Runs `reduce` (a WorkerPort::reduce_rings call) on host copies of `work`'s tensors when they
// live on another device, and copies the results back; on the CPU, on the tensors themselves.
void reduce_on_host(std::vector<WorkerPort::RingWork>& work,
                    const std::function<void(std::vector<WorkerPort::RingWork>&)>& reduce);

// Before any CUDA use, for a daemon whose `device_name` is CUDA: sets CUBLAS_WORKSPACE_CONFIG
// to ":4096:8" unless it is set already. cuBLAS reads it when its first handle is made; with it
// cuBLAS's results do not depend on how its workspace happens to be split, which a job with
// `[train] deterministic` needs (PyTorch's reproducibility notes). Returns whether it set it.
bool prepare_cuda_environment(const std::string& device_name);

// A job's `[train] deterministic = true`: from construction to destruction LibTorch picks
// deterministic algorithms (an operation without one fails with LibTorch's error naming it),
// cuDNN its deterministic ones and no benchmarking; the destructor restores what was set
// before. With `enabled` false it changes nothing. The settings are the process's: one job at
// a time per daemon.
class DeterministicAlgorithms {
 public:
  explicit DeterministicAlgorithms(bool enabled);
  ~DeterministicAlgorithms();
  DeterministicAlgorithms(const DeterministicAlgorithms&) = delete;
  DeterministicAlgorithms& operator=(const DeterministicAlgorithms&) = delete;

 private:
  bool enabled_;
  bool algorithms_ = false, warn_only_ = false, cudnn_deterministic_ = false,
       cudnn_benchmark_ = false;
};

// When `e` says a device ran out of memory (c10::OutOfMemoryError, or its text rethrown by the
// TorchScript interpreter as another error): what it tried, e.g. "tried to allocate 2.00 GiB",
// or "" when it does not say. std::nullopt for any other error.
std::optional<std::string> out_of_memory(const std::exception& e);

}  // namespace ravnest::worker
