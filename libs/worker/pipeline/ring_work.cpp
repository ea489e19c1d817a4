#include "libs/worker/pipeline/ring_work.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "libs/training/optimizer.h"

namespace ravnest::worker {

namespace {

// A gradient that is not there yet is made, as zeros, so that every member sends alike.
at::Tensor gradient_of(at::Tensor parameter) {
  at::Tensor& grad = parameter.mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(parameter);
  return grad;
}

}  // namespace

std::vector<WorkerPort::RingWork> cluster_ring_work(
    const stage::Stage& stage, const std::vector<config::RingMembership>& rings,
    RingTensors what, torch::optim::Optimizer* optimizer) {
  std::map<std::string, at::Tensor> parameters, buffers;
  for (const auto& p : stage.named_parameters()) parameters[p.name] = p.value;
  for (const auto& b : stage.named_buffers()) buffers[b.name] = b.value;
  std::vector<WorkerPort::RingWork> work;
  for (const auto& ring : rings) {
    WorkerPort::RingWork item;
    item.ring = &ring;
    for (const auto& name : ring.parameters) {
      auto p = parameters.find(name);
      if (what == RingTensors::kGradients) {
        if (p == parameters.end() || !p->second.requires_grad()) continue;
        item.tensors.push_back(gradient_of(p->second));
        continue;
      }
      if (p != parameters.end()) {
        item.tensors.push_back(p->second);
        if (what == RingTensors::kState && optimizer) {
          for (auto& t : training::optimizer_state_tensors(*optimizer, p->second)) {
            item.tensors.push_back(t);
          }
        }
      } else if (auto b = buffers.find(name); b != buffers.end()) {
        item.tensors.push_back(b->second);
      }
    }
    if (!item.tensors.empty()) work.push_back(std::move(item));
  }
  return work;
}

std::vector<WorkerPort::RingWork> outer_ring_work(
    const stage::Stage& stage, const std::vector<config::RingMembership>& rings,
    const std::map<std::string, at::Tensor>& deltas) {
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : stage.named_buffers()) buffers[b.name] = b.value;
  std::vector<WorkerPort::RingWork> work;
  for (const auto& ring : rings) {
    WorkerPort::RingWork item;
    item.ring = &ring;
    for (const auto& name : ring.parameters) {
      if (auto d = deltas.find(name); d != deltas.end()) {
        item.tensors.push_back(d->second);
      } else if (auto b = buffers.find(name); b != buffers.end()) {
        item.tensors.push_back(b->second);
      }
    }
    if (!item.tensors.empty()) work.push_back(std::move(item));
  }
  return work;
}

std::vector<SharedParameters> shared_parameters(const stage::Stage& stage, const config::NodeMetadata& node,
                                               const std::vector<config::RingMembership>& shared_rings) {
  std::map<std::string, at::Tensor> by_canonical;
  for (const auto& p : stage.named_parameters()) {
    auto tied = node.tied_parameters.find(p.name);
    by_canonical.emplace(tied == node.tied_parameters.end() ? p.name : tied->second, p.value);
  }
  std::set<std::string> buffers;
  for (const auto& b : stage.named_buffers()) buffers.insert(b.name);
  std::vector<SharedParameters> shared;
  for (const auto& ring : shared_rings) {
    SharedParameters item{&ring, {}};
    for (const auto& name : ring.parameters) {
      auto it = by_canonical.find(name);
      if (it == by_canonical.end()) {
        // Plans written before buffers were left out of shared_parameters list them too; a
        // buffer is read, not trained, and every holder keeps its own copy. Every holder skips
        // it alike, so the ring's tensors still line up.
        if (buffers.count(name)) continue;
        throw std::runtime_error("shared parameter " + name + " is not in this stage");
      }
      item.parameters.push_back(it->second);
    }
    if (!item.parameters.empty()) shared.push_back(std::move(item));
  }
  return shared;
}

std::vector<WorkerPort::RingWork> shared_gradient_work(
    const stage::Stage& stage, const config::NodeMetadata& node,
    const std::vector<config::RingMembership>& shared_rings) {
  std::vector<WorkerPort::RingWork> work;
  for (auto& shared : shared_parameters(stage, node, shared_rings)) {
    WorkerPort::RingWork item;
    item.ring = shared.ring;
    for (auto& parameter : shared.parameters) item.tensors.push_back(gradient_of(parameter));
    work.push_back(std::move(item));
  }
  return work;
}

}  // namespace ravnest::worker
