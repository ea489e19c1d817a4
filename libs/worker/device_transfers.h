// DeviceTransfers: how a job's tensors cross between its compute device and the host, one per
// job, owned by the StageWorker on the compute thread (not thread-safe).
//
// On the CPU device it is the identity: send() hands the message to the port at once, to_device
// returns the value as it is, reduce_on_host reduces the tensors themselves. Nothing is pinned.
//
// On a CUDA device (only in a build with RAVNEST_WITH_CUDA):
// - Outgoing (send): each device tensor of the message is copied, non_blocking, into pinned host
//   memory (LibTorch's caching host allocator) on a CUDA stream of this object's own (the copy
//   stream), after that stream waits on an event recorded on the compute stream, so the copy sees
//   what the forward or backward queued before it without the compute thread waiting. The device
//   tensor is kept (and recordStream'ed on the copy stream) until the copy finished. The message,
//   its tensors now pinned host tensors that wire_form passes on untouched, goes to `deliver`
//   only once its copy event completed, and messages leave in the order they were sent (a message
//   without device tensors waits behind earlier ones too). poll() hands over those whose copies
//   are done without waiting; flush() waits for the rest.
// - Incoming (to_device): host tensors are staged in pinned memory and copied non_blocking on the
//   copy stream; the compute stream waits on the copy's event before it uses them, and the device
//   tensor is recordStream'ed on the compute stream, which owns it from then on.
// - Rings (reduce_on_host): the tensors go to pinned host copies the same way, the ring runs on
//   them, and the results come back through the copy stream before the compute stream goes on.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "libs/worker/transfer.h"
#include "libs/worker/worker_port.h"

namespace ravnest::worker {

class DeviceTransfers {
 public:
  using Deliver = std::function<void(TransferMessage)>;
  using Reduce = std::function<void(std::vector<WorkerPort::RingWork>&)>;

  // `device` is the job's compute device (compute_device.h); `deliver` hands a message to the
  // port (WorkerPort::send). Throws std::runtime_error for a CUDA device in a build without CUDA.
  DeviceTransfers(c10::Device device, Deliver deliver);
  ~DeviceTransfers();
  DeviceTransfers(const DeviceTransfers&) = delete;
  DeviceTransfers& operator=(const DeviceTransfers&) = delete;

  const c10::Device& device() const { return device_; }

  // Outgoing: `message` reaches `deliver` after every message sent before it, once its device
  // tensors are on the host (at once on the CPU device with nothing pending).
  void send(TransferMessage message);
  // Hands over, in order, the pending messages whose copies finished; never waits.
  void poll();
  // Waits for every pending copy and hands over every pending message, in order.
  void flush();
  // The job failed: forgets the pending messages (their copies may still finish; the memory is
  // released only after that, by the caching allocators).
  void drop();
  size_t pending() const { return pending_.size(); }

  // Incoming: `value` with every tensor in it (also in tuples, lists and dicts) on the device,
  // ready for the compute stream's next kernels. No copy for a tensor already there.
  c10::IValue to_device(const c10::IValue& value);

  // Runs `reduce` (a WorkerPort::reduce_rings call) on host copies of `work`'s tensors and copies
  // the results back into them; on the CPU device, on the tensors themselves. Rings reduce on the
  // host because their transport (RingLink, shared segments, the capnp messages the segments go
  // in) reads and writes host memory and the ring's arithmetic (RingAllReduce) is CPU code; a
  // device-to-device all-reduce (NCCL) would need every member on one machine's GPUs, which a
  // ring between daemons on different hosts is not. Hands over the pending messages first: the
  // ring blocks, and a peer may need them to reach it.
  void reduce_on_host(std::vector<WorkerPort::RingWork>& work, const Reduce& reduce);

 private:
  struct Copy;     // one pending message (device_transfers.cpp)
  struct Streams;  // the CUDA streams (CUDA builds only)

  bool on_cpu() const { return device_.is_cpu(); }

  c10::Device device_;
  Deliver deliver_;
  std::unique_ptr<Streams> streams_;
  std::deque<std::unique_ptr<Copy>> pending_;
};

}  // namespace ravnest::worker
