#include "libs/training/device_memory.h"

#include <stdexcept>
#include <string>

#include "libs/torch_support/torch_compat.h"

#if RAVNEST_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace ravnest::training {

namespace {

[[noreturn]] void not_measurable(const c10::Device& device) {
  throw std::runtime_error("device " + device.str() + ": no device memory to read (" +
                           torch_support::torch_description() + ")");
}

#if RAVNEST_WITH_CUDA
c10::DeviceIndex index_of(const c10::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
#endif

}  // namespace

bool device_memory_measurable(const c10::Device& device) {
  return torch_support::kWithCuda && device.is_cuda();
}

DeviceMemory read_device_memory(const c10::Device& device) {
  if (!device_memory_measurable(device)) not_measurable(device);
#if RAVNEST_WITH_CUDA
  const c10::DeviceIndex index = index_of(device);
  c10::cuda::CUDAGuard guard(index);
  c10::cuda::device_synchronize();
  size_t free = 0, total = 0;
  const cudaError_t status = cudaMemGetInfo(&free, &total);
  if (status != cudaSuccess) {
    throw std::runtime_error("device " + device.str() + ": cannot read its memory: " +
                             cudaGetErrorString(status));
  }
  // Index 0 of each statistic is the aggregate over the allocator's pools (StatType::AGGREGATE,
  // whose namespace differs between LibTorch versions).
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  DeviceMemory memory;
  memory.total_bytes = static_cast<int64_t>(total);
  memory.free_bytes = static_cast<int64_t>(free);
  memory.reserved_bytes = stats.reserved_bytes[0].current;
  memory.reserved_peak_bytes = stats.reserved_bytes[0].peak;
  memory.allocated_peak_bytes = stats.allocated_bytes[0].peak;
  return memory;
#else
  not_measurable(device);
#endif
}

void reset_device_peak(const c10::Device& device) {
  if (!device_memory_measurable(device)) not_measurable(device);
#if RAVNEST_WITH_CUDA
  const c10::DeviceIndex index = index_of(device);
  c10::cuda::CUDAGuard guard(index);
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(index);
#endif
}

}  // namespace ravnest::training
