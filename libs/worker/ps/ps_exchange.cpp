#include "libs/worker/ps/ps_exchange.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::worker {

void ServerExchange::exchange(stage::Stage& stage, uint64_t update,
                              const MicroBatchTag& batch) {
  const auto& plan = node_.parameter_server;
  std::map<std::string, at::Tensor> parameters, buffers;
  for (const auto& p : stage.named_parameters()) parameters.emplace(p.name, p.value);
  for (const auto& b : stage.named_buffers()) buffers.emplace(b.name, b.value);
  std::vector<TransferMessage> pushes;
  for (const auto& server : plan.servers) {
    MicroBatchTag tag;
    tag.job_id = job_id_;
    tag.epoch = batch.epoch;
    tag.last = batch.last;
    tag.version = server_versions_[server.node];
    TransferMessage push =
        wire::addressed(TransferKind::kPsGradients, node_.node_id, server.node, tag);
    push.set_update(update);
    for (size_t i = 0; i < server.tensors.size(); ++i) {
      const auto& name = server.tensors[i];
      if (auto p = parameters.find(name); p != parameters.end()) {
        if (!p->second.requires_grad()) continue;
        const at::Tensor& grad = p->second.grad();
        // Zeros for a parameter the loss did not reach, as the reference does.
        push.values.emplace_back(static_cast<uint32_t>(i),
                                 grad.defined() ? grad : at::zeros_like(p->second));
      } else if (auto b = buffers.find(name); b != buffers.end()) {
        push.values.emplace_back(static_cast<uint32_t>(i), b->second);
      } else {
        throw std::runtime_error("the plan's shard of node_" + std::to_string(server.node) +
                                 " names " + name + ", which this stage lacks");
      }
    }
    pushes.push_back(std::move(push));
  }
  auto weights = port_.exchange_with_servers(std::move(pushes));
  torch::NoGradGuard no_grad;
  for (size_t s = 0; s < plan.servers.size() && s < weights.size(); ++s) {
    const auto& server = plan.servers[s];
    server_versions_[server.node] = weights[s].batch.version;
    for (const auto& [index, value] : weights[s].values) {
      if (index >= server.tensors.size() || !value.isTensor()) {
        throw std::runtime_error(config::node_name(server.node) +
                                 " answered with a tensor outside its shard");
      }
      const auto& name = server.tensors[index];
      auto p = parameters.find(name);
      at::Tensor target = p != parameters.end() ? p->second : buffers.at(name);
      if (target.sizes() != value.toTensor().sizes()) {
        throw std::runtime_error(config::node_name(server.node) + " answered " + name +
                                 " with another shape");
      }
      target.copy_(value.toTensor());
    }
  }
}

}  // namespace ravnest::worker
