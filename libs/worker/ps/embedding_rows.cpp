#include "libs/worker/ps/embedding_rows.h"

#include <map>
#include <stdexcept>

#include <ATen/ATen.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/stage/torchscript_stage.h"
#include "libs/training/sparse_optimizer.h"

namespace ravnest::worker {

EmbeddingRows::EmbeddingRows(const WorkerSetup& setup, WorkerPort& port)
    : setup_(setup), port_(port) {
  const auto& tables = setup_.node.parameter_server.sparse_tables;
  // The tables are attributes reached by path: TorchScript's (a hybrid plan cuts TorchScript).
  torch::jit::Module* script = tables.empty() ? nullptr : stage::torchscript_module(*setup_.stage);
  if (!tables.empty() && !script) {
    throw std::runtime_error("a hybrid plan's sparse tables need a TorchScript stage; this one is " +
                             setup_.stage->format());
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    TableSlot slot;
    slot.index = t;
    slot.server = tables[t].server;
    const std::string& weight = tables[t].weight;
    const size_t dot = weight.rfind('.');
    slot.attribute = dot == std::string::npos ? weight : weight.substr(dot + 1);
    slot.owner = *script;
    for (size_t start = 0; dot != std::string::npos && start <= dot;) {
      const size_t next = weight.find('.', start);
      slot.owner = slot.owner.attr(weight.substr(start, next - start)).toModule();
      start = next + 1;
    }
    slot.placeholder = slot.owner.attr(slot.attribute).toTensor();
    bool found = false;
    for (size_t i = 0; i < setup_.node.inputs.size(); ++i) {
      const auto& input = setup_.node.inputs[i];
      if (input.model_input && *input.model_input == tables[t].index_input) {
        slot.input = i;
        found = true;
      }
    }
    if (!found) {
      throw std::runtime_error("the stage takes no model input " +
                               std::to_string(tables[t].index_input) + " for " + weight);
    }
    slots_.push_back(std::move(slot));
  }
  pending_ids_.resize(slots_.size());
  pending_grads_.resize(slots_.size());
}

EmbeddingRows::Lookup EmbeddingRows::look_up(const MicroBatchTag& batch,
                                             std::vector<c10::IValue>& args, bool train) {
  Lookup m;
  std::map<int, TransferMessage> lookups;  // by server
  m.row_ids.assign(slots_.size(), at::Tensor());
  m.rows.assign(slots_.size(), at::Tensor());
  for (size_t t = 0; t < slots_.size(); ++t) {
    const TableSlot& slot = slots_[t];
    const auto& weight = setup_.node.parameter_server.sparse_tables[slot.index].weight;
    if (!args[slot.input].isTensor()) {
      throw std::runtime_error("the indices of " + weight + " are not a tensor");
    }
    const at::Tensor indices = args[slot.input].toTensor();
    if (!at::isIntegralType(indices.scalar_type(), /*includeBool=*/false)) {
      throw std::runtime_error("the indices of " + weight + " must be integers");
    }
    // Sorted unique ids; each index becomes its id's position among them.
    auto [ids, inverse, counts] = at::_unique2(indices, /*sorted=*/true, /*return_inverse=*/true);
    m.row_ids[t] = ids.to(at::kLong);
    args[slot.input] = inverse.to(indices.scalar_type());
    auto [it, fresh] = lookups.try_emplace(slot.server);
    TransferMessage& lookup = it->second;
    if (fresh) {
      lookup = wire::addressed(TransferKind::kPsLookup, setup_.node.node_id, slot.server, batch);
      lookup.set_lookup(lookups_);
    }
    lookup.values.emplace_back(static_cast<uint32_t>(slot.index), m.row_ids[t]);
  }
  ++lookups_;
  std::vector<TransferMessage> requests;
  for (auto& [server, lookup] : lookups) requests.push_back(std::move(lookup));
  for (auto& answer : port_.lookup_rows(std::move(requests))) {
    for (auto& [index, value] : answer.values) {
      size_t t = 0;
      while (t < slots_.size() && slots_[t].index != index) ++t;
      if (t == slots_.size() || slots_[t].server != answer.from_node || !value.isTensor() ||
          m.rows[t].defined()) {
        throw std::runtime_error(config::node_name(answer.from_node) +
                                 " answered a lookup with rows it was not asked for");
      }
      at::Tensor rows = value.toTensor();
      auto expected = slots_[t].placeholder.sizes().vec();
      expected[0] = m.row_ids[t].size(0);
      if (rows.sizes().vec() != expected) {
        throw std::runtime_error(config::node_name(answer.from_node) +
                                 " answered a lookup with rows of another shape");
      }
      rows = rows.to(setup_.device, slots_[t].placeholder.scalar_type()).detach();
      if (train && slots_[t].placeholder.requires_grad()) rows.requires_grad_(true);
      m.rows[t] = rows;
      slots_[t].owner.setattr(slots_[t].attribute, rows);
    }
  }
  for (size_t t = 0; t < slots_.size(); ++t) {
    if (!m.rows[t].defined()) {
      put_back_placeholders();
      throw std::runtime_error(config::node_name(slots_[t].server) +
                               " did not answer a lookup of every table it holds");
    }
  }
  return m;
}

void EmbeddingRows::put_back_placeholders() {
  for (auto& slot : slots_) slot.owner.setattr(slot.attribute, slot.placeholder);
}

void EmbeddingRows::collect_gradients(const Lookup& m) {
  for (size_t t = 0; t < slots_.size() && t < m.rows.size(); ++t) {
    if (!m.rows[t].defined() || !m.rows[t].requires_grad()) continue;
    at::Tensor grad = m.rows[t].grad();
    if (!grad.defined()) grad = at::zeros_like(m.rows[t]);
    if (grad.is_sparse()) grad = grad.to_dense();
    pending_ids_[t].push_back(m.row_ids[t]);
    pending_grads_[t].push_back(grad.detach());
  }
}

// The row gradients of the update's lookups, summed per id, to the servers holding the tables;
// waits until every server has applied this update (everybody's), so the next lookup sees it.
void EmbeddingRows::push_gradients(uint64_t update, const MicroBatchTag& batch) {
  std::map<int, TransferMessage> pushes;
  for (size_t t = 0; t < slots_.size(); ++t) {
    const TableSlot& slot = slots_[t];
    auto [it, fresh] = pushes.try_emplace(slot.server);
    TransferMessage& push = it->second;
    if (fresh) {
      MicroBatchTag tag;
      tag.job_id = setup_.job_id;
      tag.epoch = batch.epoch;
      tag.last = batch.last;
      push = wire::addressed(TransferKind::kPsGradients, setup_.node.node_id, slot.server, tag);
      push.set_update(update);
      push.codec = setup_.compression.gradients;
    }
    auto [ids, sum] = training::coalesce_rows(pending_ids_[t], pending_grads_[t]);
    pending_ids_[t].clear();
    pending_grads_[t].clear();
    push.values.emplace_back(wire::row_ids_value(slot.index), ids);
    push.values.emplace_back(wire::row_sums_value(slot.index), sum);
  }
  std::vector<TransferMessage> list;
  for (auto& [server, push] : pushes) list.push_back(std::move(push));
  port_.exchange_with_servers(std::move(list));
}

}  // namespace ravnest::worker
