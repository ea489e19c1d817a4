#include "libs/worker/device_transfers.h"

#include <stdexcept>
#include <utility>

#include <ATen/ATen.h>

#include "libs/torch_support/torch_compat.h"
#include "libs/worker/compute_device.h"

#if RAVNEST_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ravnest::worker {


#if RAVNEST_WITH_CUDA

struct DeviceTransfers::Streams {
  c10::DeviceIndex index;
  c10::cuda::CUDAStream copy;
  // The stream the compute thread's kernels run on: the current stream of the device (the
  // default stream unless someone set another) when asked, as LibTorch's ops use it.
  c10::cuda::CUDAStream compute() const { return c10::cuda::getCurrentCUDAStream(index); }
  // The copy stream waits for everything queued on the compute stream so far.
  void copy_after_compute() const {
    c10::cuda::CUDAEvent ready;
    ready.record(compute());
    ready.block(copy);
  }
  // The compute stream waits for everything queued on the copy stream so far.
  void compute_after_copy() const {
    c10::cuda::CUDAEvent done;
    done.record(copy);
    done.block(compute());
  }
  // A pinned host copy of device tensor `source`, queued on the copy stream (the caller made it
  // wait for the compute stream); `source`'s memory is not reused before the copy ran.
  at::Tensor to_pinned_host(const at::Tensor& source) const {
    at::Tensor host = at::empty(
        source.sizes(),
        at::TensorOptions().dtype(source.scalar_type()).device(c10::kCPU).pinned_memory(true));
    {
      c10::cuda::CUDAStreamGuard guard(copy);
      host.copy_(source, /*non_blocking=*/true);
    }
    if (source.numel() > 0) {
      c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), copy);
    }
    return host;
  }
};

struct DeviceTransfers::Copy {
  TransferMessage message;
  std::vector<at::Tensor> sources;              // the device tensors, kept until copied
  std::unique_ptr<c10::cuda::CUDAEvent> done;   // on the copy stream after the copies
  bool finished() const { return !done || done->query(); }
  void wait() const {
    if (done) done->synchronize();
  }
};

#else

struct DeviceTransfers::Streams {};

struct DeviceTransfers::Copy {
  TransferMessage message;
  bool finished() const { return true; }
  void wait() const {}
};

#endif

DeviceTransfers::DeviceTransfers(c10::Device device, Deliver deliver)
    : device_(device), deliver_(std::move(deliver)) {
  if (on_cpu()) return;
#if RAVNEST_WITH_CUDA
  if (!device_.is_cuda()) {
    throw std::runtime_error("device " + device_.str() + ": only cpu and cuda are supported");
  }
  const c10::DeviceIndex index =
      device_.has_index() ? device_.index() : c10::cuda::current_device();
  device_ = c10::Device(c10::kCUDA, index);
  streams_.reset(new Streams{index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)});
#else
  throw std::runtime_error("device " + device_.str() + ": this build of ravnest has no CUDA");
#endif
}

DeviceTransfers::~DeviceTransfers() {
  // Pending copies may still run: their memory goes back to the caching allocators only after
  // (recordStream, the host allocator's events), so dropping them here is safe.
}

void DeviceTransfers::send(TransferMessage message) {
  auto copy = std::make_unique<Copy>();
#if RAVNEST_WITH_CUDA
  if (streams_) {
    bool waited = false;
    auto offload = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || !t.is_cuda()) return t;
      if (!waited) {
        streams_->copy_after_compute();
        waited = true;
      }
      at::Tensor source = t.detach();
      at::Tensor host = streams_->to_pinned_host(source);
      if (t.requires_grad()) host.requires_grad_(true);  // the wire says what the tensor said
      copy->sources.push_back(std::move(source));
      return host;
    };
    for (auto& entry : message.values) entry.second = map_tensors(entry.second, offload);
    if (waited) {
      copy->done = std::make_unique<c10::cuda::CUDAEvent>();
      copy->done->record(streams_->copy);
    }
  }
#endif
  copy->message = std::move(message);
  pending_.push_back(std::move(copy));
  poll();
}

void DeviceTransfers::poll() {
  while (!pending_.empty() && pending_.front()->finished()) {
    std::unique_ptr<Copy> copy = std::move(pending_.front());
    pending_.pop_front();
    deliver_(std::move(copy->message));
  }
}

void DeviceTransfers::flush() {
  while (!pending_.empty()) {
    pending_.front()->wait();
    poll();
  }
}

void DeviceTransfers::drop() { pending_.clear(); }

c10::IValue DeviceTransfers::to_device(const c10::IValue& value) {
#if RAVNEST_WITH_CUDA
  if (streams_) {
    bool waited = false;
    std::vector<at::Tensor> fresh;
    auto upload = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || t.device() == device_) return t;
      if (!t.is_cpu()) return t.to(device_);  // another GPU: LibTorch's own peer copy
      if (!waited) {
        // The new device memory comes from the copy stream's pool, which the compute stream
        // may not have finished with: the copy waits for it.
        streams_->copy_after_compute();
        waited = true;
      }
      const auto options = at::TensorOptions().dtype(t.scalar_type());
      at::Tensor pinned = at::empty(t.sizes(), options.device(c10::kCPU).pinned_memory(true));
      pinned.copy_(t);
      at::Tensor on_device;
      {
        c10::cuda::CUDAStreamGuard guard(streams_->copy);
        on_device = at::empty(t.sizes(), options.device(device_));
        on_device.copy_(pinned, /*non_blocking=*/true);
      }
      if (t.requires_grad()) on_device.requires_grad_(true);
      fresh.push_back(on_device);
      return on_device;
    };
    c10::IValue out = map_tensors(value, upload);
    if (waited) {
      streams_->compute_after_copy();
      // From now on the compute stream uses (and frees) them.
      for (const auto& t : fresh) {
        if (t.numel() > 0) {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                        streams_->compute());
        }
      }
    }
    return out;
  }
#endif
  return worker::to_device(value, device_);
}

void DeviceTransfers::reduce_on_host(std::vector<WorkerPort::RingWork>& work,
                                     const Reduce& reduce) {
  flush();
#if RAVNEST_WITH_CUDA
  if (streams_) {
    bool any = false;
    for (const auto& w : work) {
      for (const auto& t : w.tensors) any = any || (t.defined() && t.is_cuda());
    }
    if (!any) return reduce(work);
    streams_->copy_after_compute();
    std::vector<WorkerPort::RingWork> host = work;
    for (auto& w : host) {
      for (auto& t : w.tensors) {
        if (t.defined() && t.is_cuda()) t = streams_->to_pinned_host(t.detach());
      }
    }
    {
      c10::cuda::CUDAEvent copied;
      copied.record(streams_->copy);
      copied.synchronize();  // the ring reads the host copies from other threads
    }
    reduce(host);
    // Back into the device tensors on the copy stream, after whatever the compute stream queued
    // meanwhile (nothing, normally); the compute stream goes on once they are there.
    streams_->copy_after_compute();
    {
      c10::cuda::CUDAStreamGuard guard(streams_->copy);
      for (size_t i = 0; i < work.size(); ++i) {
        for (size_t j = 0; j < work[i].tensors.size(); ++j) {
          at::Tensor& target = work[i].tensors[j];
          if (!target.defined() || !target.is_cuda()) continue;
          target.copy_(host[i].tensors[j], /*non_blocking=*/true);
          if (target.numel() > 0) {
            c10::cuda::CUDACachingAllocator::recordStream(target.storage().data_ptr(),
                                                          streams_->copy);
          }
        }
      }
    }
    streams_->compute_after_copy();
    return;
  }
#endif
  worker::reduce_on_host(work, reduce);
}

}  // namespace ravnest::worker
