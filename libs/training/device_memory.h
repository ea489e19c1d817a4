// What a CUDA device's memory holds for this process, as LibTorch's caching allocator counts it,
// and what the card has. Memory a stage needs on a GPU is what the allocator reserves from the
// card (its tensors, and the blocks it keeps cached between them), plus the CUDA context, which
// no allocator statistic shows: the card's used memory once the context exists (cudaMemGetInfo;
// that counts other processes on the card too).
//
// On the CPU, or in a build without CUDA (Debian's LibTorch 1.13), there is nothing to read:
// measurable() is false and every other function throws std::runtime_error (one line).
// Each call blocks until the device's queued work is done where it reads peaks.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace ravnest::training {

struct DeviceMemory {
  int64_t total_bytes = 0;          // the card's memory
  int64_t free_bytes = 0;           // what the card has free now (all processes)
  int64_t reserved_bytes = 0;       // held by this process's caching allocator now
  int64_t reserved_peak_bytes = 0;  // ... at most since the last reset_device_peak
  int64_t allocated_peak_bytes = 0; // in tensors, at most since the last reset_device_peak
};

// Whether `device` is a CUDA device and this build can read its memory.
bool device_memory_measurable(const c10::Device& device);

// Creates the device's context if it does not exist yet (a first allocation does the same).
DeviceMemory read_device_memory(const c10::Device& device);

// The next read's peaks start from what is reserved and allocated now.
void reset_device_peak(const c10::Device& device);

}  // namespace ravnest::training
