#include "libs/worker/pipeline/stage_rings.h"

#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::worker {

void StageRings::reduce_across_clusters(
    RingTensors what, const std::function<void(const std::function<void()>&)>& change_weights) {
  if (setup_.node.rings.empty()) return;
  auto work = cluster_ring_work(*setup_.stage, setup_.node.rings, what,
                                setup_.average_optim ? setup_.optimizer.get() : nullptr);
  for (auto& w : work) {
    w.codec = setup_.compression.rings;
    w.stream = what == RingTensors::kGradients ? "gradients"
               : what == RingTensors::kState   ? "state"
                                               : "final";
  }
  torch::NoGradGuard no_grad;
  const uint64_t round = reduce_round++;
  auto reduce = [&](std::vector<WorkerPort::RingWork>& on_host) {
    port_.reduce_rings(round, on_host);
  };
  if (what == RingTensors::kGradients) return transfers_.reduce_on_host(work, reduce);
  change_weights([&] { transfers_.reduce_on_host(work, reduce); });
}

void StageRings::average_across_clusters(std::vector<WorkerPort::RingWork>& work,
                                         const char* stream) {
  if (setup_.node.rings.empty()) return;
  for (auto& w : work) {
    w.codec = setup_.compression.rings;
    w.stream = stream;
  }
  torch::NoGradGuard no_grad;
  const uint64_t round = reduce_round++;
  transfers_.reduce_on_host(work, [&](std::vector<WorkerPort::RingWork>& on_host) {
    port_.reduce_rings(round, on_host);
  });
}

void StageRings::sum_shared_gradients() {
  auto work = shared_gradient_work(*setup_.stage, setup_.node, setup_.shared_rings);
  torch::NoGradGuard no_grad;
  const uint64_t round = shared_round++;
  transfers_.reduce_on_host(work, [&](std::vector<WorkerPort::RingWork>& on_host) {
    port_.reduce_rings(round, on_host, /*average=*/false);
  });
}

}  // namespace ravnest::worker
