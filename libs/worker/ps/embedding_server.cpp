#include "libs/worker/ps/embedding_server.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/torch_support/torch_errors.h"

namespace ravnest::worker {

EmbeddingServer::EmbeddingServer(WorkerSetup setup, Options options, WorkerPort& port)
    : WorkerBase(std::move(setup), port), options_(std::move(options)) {
  if (!options_.sparse_optimizer) {
    throw std::runtime_error("sparse_optimizer: a hybrid plan's servers need [sparse_optimizer]");
  }
  std::map<std::string, at::Tensor> parameters;
  for (const auto& p : setup_.stage->named_parameters()) parameters.emplace(p.name, p.value);
  const auto& plan = setup_.node.parameter_server;
  for (size_t t = 0; t < plan.sparse_tables.size(); ++t) {
    const auto& spec = plan.sparse_tables[t];
    if (spec.server != setup_.node.node_id) continue;
    auto it = parameters.find(spec.weight);
    if (it == parameters.end()) {
      throw std::runtime_error("the plan gives this server " + spec.weight + ", which it lacks");
    }
    if (it->second.sizes().vec() != spec.shape) {
      throw std::runtime_error(spec.weight + " does not have the plan's shape");
    }
    Table table;
    table.index = t;
    table.weight = it->second;
    table.optimizer =
        std::make_unique<training::SparseRowOptimizer>(it->second, *options_.sparse_optimizer);
    tables_.push_back(std::move(table));
  }
  if (tables_.empty()) throw std::runtime_error("this server holds no table of the plan");
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    trainer_of_node_[plan.workers[w].node] = static_cast<int>(w);
  }
}

void EmbeddingServer::start() {
  set_status([](WorkerStatus& s) { s.state = WorkerStatus::State::kRunning; });
}

EmbeddingServer::Table& EmbeddingServer::table(uint32_t index, int from_node) {
  for (auto& t : tables_) {
    if (t.index == index) return t;
  }
  throw std::runtime_error("node " + std::to_string(from_node) + " named table " +
                           std::to_string(index) + ", which this server does not hold");
}

void EmbeddingServer::receive(TransferMessage message) {
  if (failed()) return;
  // Lookups are answered after the last update too: the trainers' final validation.
  auto body = [&] {
    auto trainer = trainer_of_node_.find(message.from_node);
    if (trainer == trainer_of_node_.end()) {
      throw std::runtime_error("node " + std::to_string(message.from_node) +
                               " is not a trainer of this plan");
    }
    if (message.batch.job_id != setup_.job_id) {
      throw std::runtime_error("a message of job " + std::to_string(message.batch.job_id) +
                               " while running job " + std::to_string(setup_.job_id));
    }
    if (message.kind == TransferKind::kPsLookup) return lookup(message);
    if (message.kind != TransferKind::kPsGradients || over()) {
      throw std::runtime_error("a hybrid server takes lookups and row gradients, not this "
                               "message from node " + std::to_string(message.from_node));
    }
    take(trainer->second, std::move(message));
  };
  if (over()) {
    try {
      body();
    } catch (const std::exception& e) {
      fail(torch_support::torch_message(e));
    }
    return;
  }
  guarded(body);
}

namespace {

// Sorted, unique, within [0, rows): what a lookup and a gradient may name.
void check_ids(const at::Tensor& ids, int64_t rows, int from_node) {
  const auto where = " from node " + std::to_string(from_node);
  if (ids.scalar_type() != at::kLong || ids.dim() != 1) {
    throw std::runtime_error("row ids must be a 1-D int64 tensor" + where);
  }
  if (ids.numel() == 0) return;
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= rows) {
    throw std::runtime_error("a row id outside the table" + where);
  }
  if (ids.numel() > 1 && !(ids.slice(0, 1) > ids.slice(0, 0, -1)).all().item<bool>()) {
    throw std::runtime_error("row ids not sorted and unique" + where);
  }
}

}  // namespace

void EmbeddingServer::lookup(const TransferMessage& message) {
  // The answer carries the lookup's tag: the trainer waits for its lookup number.
  TransferMessage answer =
      wire::addressed(TransferKind::kPsRows, setup_.node.node_id, message.from_node, message.batch);
  torch::NoGradGuard no_grad;
  for (const auto& [index, value] : message.values) {
    Table& t = table(index, message.from_node);
    if (!value.isTensor()) throw std::runtime_error("a lookup without ids");
    const at::Tensor ids = value.toTensor();
    check_ids(ids, t.weight.size(0), message.from_node);
    answer.values.emplace_back(index, t.weight.index_select(0, ids));
  }
  port_.send(std::move(answer));
}

void EmbeddingServer::take(int trainer, TransferMessage message) {
  const uint64_t step = message.update();
  if (step < next_step_ || pending_[step].count(trainer)) {
    throw std::runtime_error("node " + std::to_string(message.from_node) +
                             " pushed update " + std::to_string(step) + " twice");
  }
  for (const auto& [index, value] : message.values) {
    Table& t = table(index / 2, message.from_node);  // wire::row_ids_value, row_sums_value
    if (!value.isTensor()) throw std::runtime_error("row gradients without a tensor");
    if (index == wire::row_ids_value(t.index)) {
      check_ids(value.toTensor(), t.weight.size(0), message.from_node);
    }
  }
  if (message.batch.last) trainers_done_.insert(trainer);
  pending_[step].emplace(trainer, std::move(message));
  while (true) {
    auto it = pending_.find(next_step_);
    if (it == pending_.end() || it->second.size() < trainer_of_node_.size()) break;
    const std::map<int, TransferMessage> pushes = std::move(it->second);
    pending_.erase(it);
    update(pushes);
    for (const auto& [index, push] : pushes) {
      TransferMessage ack =
          wire::addressed(TransferKind::kPsWeights, setup_.node.node_id, push.from_node, push.batch);
      ack.batch.version = next_step_ + 1;
      port_.send(std::move(ack));
    }
    ++next_step_;
  }
  set_status([&](WorkerStatus& s) { s.updates = next_step_; });
  if (trainers_done_.size() == trainer_of_node_.size() && pending_.empty() && !saved_) {
    saved_ = true;
    setup_.stage->save(setup_.trained_path);
    finish(next_step_);
  }
}

void EmbeddingServer::update(const std::map<int, TransferMessage>& pushes) {
  torch::NoGradGuard no_grad;
  const double trainers = static_cast<double>(pushes.size());
  for (auto& t : tables_) {
    std::vector<at::Tensor> ids, grads;
    for (const auto& [trainer, push] : pushes) {  // in trainer order
      at::Tensor push_ids, push_grads;
      for (const auto& [index, value] : push.values) {
        if (index == wire::row_ids_value(t.index)) push_ids = value.toTensor();
        if (index == wire::row_sums_value(t.index)) push_grads = value.toTensor();
      }
      if (!push_ids.defined() || !push_grads.defined()) continue;
      if (push_grads.dim() != t.weight.dim() || push_grads.size(0) != push_ids.size(0) ||
          push_grads.sizes().slice(1) != t.weight.sizes().slice(1)) {
        throw std::runtime_error("node " + std::to_string(push.from_node) +
                                 " sent row gradients of another shape");
      }
      ids.push_back(push_ids);
      grads.push_back(push_grads.to(t.weight.scalar_type()));
    }
    if (ids.empty()) continue;
    auto [rows, sum] = training::coalesce_rows(ids, grads);
    t.optimizer->step(rows, sum.div_(trainers));  // a step even without rows, as PyTorch's
  }
}

}  // namespace ravnest::worker
