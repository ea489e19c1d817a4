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

void StageRings::keep_shared_shares() {
  std::vector<at::Tensor> share;
  for (auto& shared : shared_parameters(*setup_.stage, setup_.node, setup_.shared_rings)) {
    for (auto& parameter : shared.parameters) {
      at::Tensor& grad = parameter.mutable_grad();
      share.push_back(grad.defined() ? grad : at::zeros_like(parameter));
      grad.reset();  // the next micro-batch's backward makes a fresh one
    }
  }
  if (!share.empty()) shares_.push_back(std::move(share));
}

void StageRings::sum_shared_gradients() {
  torch::NoGradGuard no_grad;
  const uint64_t round = shared_round++;
  auto reduce = [&](std::vector<WorkerPort::RingWork>& on_host) {
    port_.reduce_rings(round, on_host, /*average=*/false);
  };
  if (shares_.empty()) {
    auto work = shared_gradient_work(*setup_.stage, setup_.node, setup_.shared_rings);
    transfers_.reduce_on_host(work, reduce);
    return;
  }
  // Every holder kept as many shares (the update's micro-batches) of the same tensors in the
  // same order: one ring item per ring, its tensors micro-batch after micro-batch.
  auto shared = shared_parameters(*setup_.stage, setup_.node, setup_.shared_rings);
  std::vector<WorkerPort::RingWork> work;
  size_t offset = 0;
  for (const auto& ring : shared) {
    WorkerPort::RingWork item;
    item.ring = ring.ring;
    for (const auto& share : shares_) {
      for (size_t j = 0; j < ring.parameters.size(); ++j) item.tensors.push_back(share.at(offset + j));
    }
    offset += ring.parameters.size();
    work.push_back(std::move(item));
  }
  transfers_.reduce_on_host(work, reduce);
  // AccumulateGrad's order: the first micro-batch's sum becomes the gradient, each later one is
  // added into it in place.
  for (size_t r = 0; r < shared.size(); ++r) {
    for (size_t j = 0; j < shared[r].parameters.size(); ++j) {
      const auto& tensors = work[r].tensors;
      const size_t count = shared[r].parameters.size();
      at::Tensor total = tensors[j];
      for (size_t m = 1; m < shares_.size(); ++m) total.add_(tensors[m * count + j]);
      shared[r].parameters[j].mutable_grad() = total;
    }
  }
  shares_.clear();
}

}  // namespace ravnest::worker
