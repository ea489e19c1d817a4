#include "libs/worker/pipeline/update_gradients.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/utils.h>  // torch::NoGradGuard

#include "libs/planner/rings.h"
#include "libs/training/grad_clip.h"

namespace ravnest::worker {

UpdateGradients::UpdateGradients(const WorkerSetup& setup, WorkerPort& port)
    : setup_(setup), port_(port), ring_(planner::cluster_stage_ring(setup.node)) {
  if (setup_.autocast == config::Autocast::kFp16) {
    training::GradScaler::Options options;
    options.init_scale = setup_.scaler.init_scale;
    options.growth_factor = setup_.scaler.growth_factor;
    options.backoff_factor = setup_.scaler.backoff_factor;
    options.growth_interval = setup_.scaler.growth_interval;
    scaler_.emplace(options);
  }
}

std::vector<at::Tensor> UpdateGradients::gradients() const {
  const auto& node = setup_.node;
  auto position = [&](int id) {
    for (size_t k = 0; k < node.pipeline.size(); ++k) {
      if (node.pipeline[k] == id) return k;
    }
    return node.pipeline.size();
  };
  std::vector<at::Tensor> grads;
  std::set<const void*> seen;  // a tied tensor under two names counts once
  for (const auto& p : setup_.stage->named_parameters()) {
    if (!p.value.requires_grad() || !p.value.grad().defined()) continue;
    if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
    auto shared = node.shared_parameters.find(p.name);
    if (shared != node.shared_parameters.end()) {
      size_t first = node.pipeline.size();
      for (int holder : shared->second) first = std::min(first, position(holder));
      if (first != position(node.node_id)) continue;  // its first holder counts it
    }
    grads.push_back(p.value.grad());
  }
  return grads;
}

at::Tensor UpdateGradients::exchange(at::Tensor local) {
  if (ring_.size < 2) return local;
  std::vector<WorkerPort::RingWork> work(1);
  work[0].ring = &ring_;
  work[0].tensors.push_back(local);
  port_.reduce_rings(round_++, work, /*average=*/false);
  return local;
}

bool UpdateGradients::prepare() {
  if (!scaler_ && !setup_.grad_clip_norm && !setup_.grad_clip_value) return true;
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = gradients();
  bool found_inf = scaler_ && scaler_->unscale(grads);
  if (setup_.grad_clip_value) training::clip_gradients_by_value(grads, *setup_.grad_clip_value);
  const size_t stages = ring_.size < 2 ? 1 : static_cast<size_t>(ring_.size);
  const size_t self = ring_.size < 2 ? 0 : static_cast<size_t>(ring_.position);
  std::vector<at::Tensor> norms;
  if (setup_.grad_clip_norm) norms = training::gradient_norms(grads, setup_.grad_clip_norm_type);
  if (setup_.grad_clip_norm && !norm_counts_) {
    // Once: how many norms each stage contributes, to place each stage's in the vector.
    at::Tensor counts = at::zeros({static_cast<int64_t>(stages)}, at::kDouble);
    counts[static_cast<int64_t>(self)] = static_cast<double>(norms.size());
    counts = exchange(counts);
    norm_counts_.emplace();
    for (size_t k = 0; k < stages; ++k) norm_counts_->push_back(counts[k].item<int64_t>());
  }
  if (!scaler_ && !setup_.grad_clip_norm) return true;  // nothing to agree on

  // [inf/nan flag per stage] ++ [norms of stage 0] ++ [norms of stage 1] ...
  int64_t offset = static_cast<int64_t>(stages), total_slots = offset;
  if (norm_counts_) {
    for (size_t k = 0; k < stages; ++k) {
      if (k < self) offset += (*norm_counts_)[k];
      total_slots += (*norm_counts_)[k];
    }
    if ((*norm_counts_)[self] != static_cast<int64_t>(norms.size())) {
      throw std::runtime_error("gradient clipping: this stage has " + std::to_string(norms.size()) +
                               " gradients, it had " + std::to_string((*norm_counts_)[self]));
    }
  }
  at::Tensor shared = at::zeros({total_slots}, at::kFloat);
  shared[static_cast<int64_t>(self)] = found_inf ? 1.0f : 0.0f;
  for (size_t i = 0; i < norms.size(); ++i) {
    shared[offset + static_cast<int64_t>(i)] = norms[i].to(at::kCPU, at::kFloat);
  }
  shared = exchange(shared);
  // A nan norm or an inf one says the same as a flag: only found_inf decides the skip.
  found_inf = shared.narrow(0, 0, static_cast<int64_t>(stages)).sum().item<float>() != 0.0f;
  if (setup_.grad_clip_norm) {
    const c10::Device device = grads.empty() ? setup_.device : grads.front().device();
    std::vector<at::Tensor> all;
    for (int64_t i = static_cast<int64_t>(stages); i < total_slots; ++i) {
      all.push_back(shared[i].to(device));
    }
    const at::Tensor total = training::total_norm(all, setup_.grad_clip_norm_type);
    training::scale_gradients(grads, training::clip_coefficient(total, *setup_.grad_clip_norm));
  }
  return !found_inf;
}

void UpdateGradients::after_step(bool stepped) {
  if (scaler_) scaler_->update(!stepped);
}

}  // namespace ravnest::worker
