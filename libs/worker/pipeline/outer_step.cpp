#include "libs/worker/pipeline/outer_step.h"

#include <map>

#include <torch/csrc/autograd/grad_mode.h>

#include "libs/worker/pipeline/ring_work.h"

namespace ravnest::worker {

OuterStep::OuterStep(const WorkerSetup& setup, StageRings& rings) : setup_(setup), rings_(rings) {
  // Tied names share one tensor: it is tracked once, under its first name.
  std::map<const void*, size_t> index_of;
  std::vector<std::pair<std::string, at::Tensor>> live;
  for (const auto& p : setup_.stage->named_parameters()) {
    if (!p.value.is_floating_point() || !p.value.requires_grad()) continue;
    auto [it, fresh] = index_of.emplace(p.value.unsafeGetTensorImpl(), live.size());
    if (fresh) {
      live.emplace_back(p.name, p.value);
      names_.push_back({p.name});
    } else {
      names_[it->second].push_back(p.name);
    }
  }
  optimizer_ = std::make_unique<training::OuterOptimizer>(*setup_.outer, std::move(live));
}

void OuterStep::run(const std::function<void(const std::function<void()>&)>& change_weights) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> deltas = optimizer_->deltas();
  std::map<std::string, at::Tensor> by_name;
  for (size_t i = 0; i < deltas.size(); ++i) {
    for (const auto& name : names_[i]) by_name[name] = deltas[i];
  }
  change_weights([&] {
    auto work = outer_ring_work(*setup_.stage, setup_.node.rings, by_name);
    rings_.average_across_clusters(work, "outer");
    optimizer_->step(deltas);
  });
}

}  // namespace ravnest::worker
