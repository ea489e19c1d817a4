// StageRings: a stage's reduces over its rings, numbered as every member numbers them: the sums
// of shared tensors' gradients within the cluster (shared_rings, before every update) and the
// averages across clusters (node.rings: gradients before an update, parameters and buffers after
// one or at the end; ring_work.h says what each takes). The tensors cross between the compute
// device and the host through the worker's DeviceTransfers; the rounds so far are what a
// checkpoint keeps.
//
// Part of a StageWorker (stage_worker.h); compute thread only; blocks in WorkerPort::reduce_rings
// and throws what it throws.
#pragma once

#include <cstdint>
#include <functional>

#include "libs/worker/device_transfers.h"
#include "libs/worker/pipeline/ring_work.h"
#include "libs/worker/worker_setup.h"

namespace ravnest::worker {

class StageRings {
 public:
  StageRings(const WorkerSetup& setup, WorkerPort& port, DeviceTransfers& transfers)
      : setup_(setup), port_(port), transfers_(transfers) {}

  // Each copy of a shared tensor gets the gradient of the whole model: the sum over its holders.
  // With the shares kept by keep_shared_shares, added as autograd adds them in one process that
  // runs the same micro-batches: each micro-batch's holders summed first (the ring's sum; for
  // two holders the order of one addition does not matter), then micro-batch after micro-batch
  // into the gradient, as AccumulateGrad does. Without shares, each holder's own gradient (its
  // share over every micro-batch) is summed.
  void sum_shared_gradients();
  // Synchronous schedules, right after each training micro-batch's backward on this stage:
  // moves this stage's gradients of its shared tensors aside (one set per micro-batch of the
  // update) and leaves them undefined for the next micro-batch. Costs one gradient of each
  // shared tensor per micro-batch until the update, and as many in the ring.
  void keep_shared_shares();
  // Averages what `what` says with this node's copies in the other clusters. What changes the
  // parameters (kState, kFinal) runs inside `change_weights` (under async: a new version).
  void reduce_across_clusters(RingTensors what,
                              const std::function<void(const std::function<void()>&)>& change_weights);

  // Averages `work` (made by the caller, e.g. outer_ring_work) across clusters as one round of
  // the same numbering, under `stream` (what error feedback keys its residuals by), inside

  // The caller changes the weights with the result.
  void average_across_clusters(std::vector<WorkerPort::RingWork>& work, const char* stream);

  uint64_t reduce_round = 0;  // across clusters, so far
  uint64_t shared_round = 0;  // within the cluster, so far

 private:
  // Per training micro-batch since the last update, in backward order: this stage's gradients of
  // its shared tensors, in shared_parameters' order.
  std::vector<std::vector<at::Tensor>> shares_;
  const WorkerSetup& setup_;
  WorkerPort& port_;
  DeviceTransfers& transfers_;
};

}  // namespace ravnest::worker
