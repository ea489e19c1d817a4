#include "libs/worker/ps/ps_server.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/torch_support/module_file.h"
#include "libs/training/tensor_average.h"

namespace ravnest::worker {

namespace {

const config::PsServer& own_shard(const config::NodeMetadata& node) {
  for (const auto& s : node.parameter_server.servers) {
    if (s.node == node.node_id) return s;
  }
  throw std::runtime_error("this server holds no shard in the plan");
}

}  // namespace

ParameterServer::ParameterServer(WorkerSetup setup, Options options, WorkerPort& port)
    : WorkerBase(std::move(setup), port), options_(std::move(options)) {
  std::map<std::string, at::Tensor> parameters, buffers;
  for (const auto& p : setup_.stage->named_parameters()) parameters.emplace(p.name, p.value);
  for (const auto& b : setup_.stage->named_buffers()) buffers.emplace(b.name, b.value);
  for (const auto& name : own_shard(setup_.node).tensors) {
    if (auto p = parameters.find(name); p != parameters.end()) {
      tensors_.push_back(p->second);
      is_parameter_.push_back(true);
    } else if (auto b = buffers.find(name); b != buffers.end()) {
      tensors_.push_back(b->second);
      is_parameter_.push_back(false);
    } else {
      throw std::runtime_error("the plan gives this server " + name + ", which the model lacks");
    }
  }
  const auto& workers = setup_.node.parameter_server.workers;
  for (size_t w = 0; w < workers.size(); ++w) worker_of_node_[workers[w].node] = static_cast<int>(w);
}

void ParameterServer::start() {
  setup_.stage->train(true);
  set_status([](WorkerStatus& s) { s.state = WorkerStatus::State::kRunning; });
}

void ParameterServer::receive(TransferMessage message) {
  guarded([&] {
    if (message.kind != TransferKind::kPsGradients) {
      throw std::runtime_error("a server takes gradients, not this message from node " +
                               std::to_string(message.from_node));
    }
    auto worker = worker_of_node_.find(message.from_node);
    if (worker == worker_of_node_.end()) {
      throw std::runtime_error("gradients from node " + std::to_string(message.from_node) +
                               ", which is not a worker of this plan");
    }
    if (message.batch.job_id != setup_.job_id) {
      throw std::runtime_error("gradients of job " + std::to_string(message.batch.job_id) +
                               " while running job " + std::to_string(setup_.job_id));
    }
    for (const auto& [index, value] : message.values) {
      if (index >= tensors_.size() || !value.isTensor() ||
          value.toTensor().sizes() != tensors_[index].sizes()) {
        throw std::runtime_error("node " + std::to_string(message.from_node) +
                                 " sent a tensor that does not fit shard tensor " +
                                 std::to_string(index));
      }
    }
    take({worker->second, std::move(message)});
  });
}

void ParameterServer::take(Push push) {
  const int worker = push.worker;
  const uint64_t step = push.message.update();
  const bool last = push.message.batch.last;
  std::vector<at::Tensor> buffers(tensors_.size());
  for (const auto& [index, value] : push.message.values) {
    if (!is_parameter_[index]) buffers[index] = value.toTensor();
  }
  latest_buffers_[worker] = std::move(buffers);
  if (last) workers_done_.insert(worker);
  const size_t workers = worker_of_node_.size();

  switch (options_.ps.mode) {
    case config::PsMode::kAsync: {
      const uint64_t staleness = version_ - std::min(version_, push.message.batch.version);
      if (staleness > static_cast<uint64_t>(options_.ps.max_staleness)) {
        ++dropped_;
      } else {
        update({push});
      }
      answer(worker, step, false);
      break;
    }
    case config::PsMode::kSync:
    case config::PsMode::kBackup: {
      if (step < next_step_) {  // backup: this update was made without it
        ++dropped_;
        break;
      }
      auto& waiting = pending_[step];
      waiting.push_back(std::move(push));
      const size_t needed = options_.ps.mode == config::PsMode::kSync
                                ? workers
                                : static_cast<size_t>(options_.ps.backup);
      if (step != next_step_ || waiting.size() < needed) break;
      // Updates of fast workers may be waiting behind this one: make each in turn.
      while (true) {
        auto it = pending_.find(next_step_);
        if (it == pending_.end() || it->second.size() < needed) break;
        std::vector<Push> used = std::move(it->second);
        pending_.erase(it);
        std::sort(used.begin(), used.end(),
                  [](const Push& a, const Push& b) { return a.worker < b.worker; });
        update(used);
        const bool everyone_last = options_.ps.mode == config::PsMode::kSync &&
                                   workers_done_.size() == workers &&
                                   std::all_of(used.begin(), used.end(), [](const Push& p) {
                                     return p.message.batch.last;
                                   });
        if (everyone_last) average_buffers();
        for (size_t w = 0; w < workers; ++w) answer(static_cast<int>(w), next_step_, everyone_last);
        ++next_step_;
      }
      break;
    }
  }
  set_status([&](WorkerStatus& s) {
    s.updates = version_;
    s.epoch = epoch_;
  });
  finish_if_done();
}

void ParameterServer::update(const std::vector<Push>& pushes) {
  torch::NoGradGuard no_grad;
  uint32_t epoch = epoch_;
  for (const auto& p : pushes) epoch = std::max(epoch, p.message.batch.epoch);
  while (epoch_ < epoch) {  // as a pipeline's stages do: the epoch's end before its next update
    if (setup_.lr_schedule) setup_.lr_schedule->on_epoch_end();
    ++epoch_;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!is_parameter_[i]) continue;
    std::vector<at::Tensor> grads;
    for (const auto& p : pushes) {
      for (const auto& [index, value] : p.message.values) {
        if (index == i) grads.push_back(value.toTensor());
      }
    }
    // A worker whose loss does not reach a parameter sends zeros, as DDP does: all or none.
    if (grads.empty()) {
      tensors_[i].mutable_grad() = at::Tensor();
      continue;
    }
    if (grads.size() != pushes.size()) {
      throw std::runtime_error("a worker left out the gradient of shard tensor " +
                               std::to_string(i));
    }
    tensors_[i].mutable_grad() = training::average_of(grads);
  }
  setup_.optimizer->step();
  setup_.optimizer->zero_grad();
  if (setup_.lr_schedule) setup_.lr_schedule->on_update();
  ++version_;
  evaluate_if_due(false);
}

void ParameterServer::average_buffers() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (is_parameter_[i]) continue;
    std::vector<at::Tensor> copies;
    for (const auto& [worker, buffers] : latest_buffers_) {  // in worker order
      if (buffers[i].defined()) copies.push_back(buffers[i]);
    }
    if (!copies.empty()) tensors_[i].copy_(training::average_of(copies));
  }
}

void ParameterServer::answer(int worker, uint64_t step, bool with_buffers) {
  const auto& peer = setup_.node.parameter_server.workers[static_cast<size_t>(worker)];
  send_weights(peer.node, step, false, with_buffers);
}

// To the evaluator, `step` is the evaluation's round (every server sends the same rounds), to a
// worker the update answered.
void ParameterServer::send_weights(int to_node, uint64_t step, bool last, bool with_buffers) {
  MicroBatchTag tag;
  tag.job_id = setup_.job_id;
  TransferMessage message =
      wire::addressed(TransferKind::kPsWeights, setup_.node.node_id, to_node, tag);
  message.set_update(step);
  message.batch.version = version_;
  message.batch.epoch = epoch_;
  message.batch.last = last;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!is_parameter_[i] && !with_buffers) continue;
    // A copy: the message travels after the next update changed the tensors in place.
    message.values.emplace_back(static_cast<uint32_t>(i), tensors_[i].detach().clone());
  }
  port_.send(std::move(message));
}

void ParameterServer::evaluate_if_due(bool last) {
  const auto& evaluator = setup_.node.parameter_server.evaluator;
  if (!evaluator) return;
  if (last) {
    if (evaluated_last_) return;
    evaluated_last_ = true;
    send_weights(evaluator->node, kFinalRound, true, true);
    return;
  }
  const int64_t every = options_.ps.eval_freq;
  if (every <= 0 || version_ == 0 || version_ % static_cast<uint64_t>(every) != 0 ||
      version_ == last_evaluated_) {
    return;
  }
  last_evaluated_ = version_;
  average_buffers();  // the workers' statistics so far: what the model would be evaluated with
  send_weights(evaluator->node, version_ / static_cast<uint64_t>(every), false, true);
}

void ParameterServer::finish_if_done() {
  if (workers_done_.size() < worker_of_node_.size()) return;
  if (options_.ps.mode != config::PsMode::kAsync && !pending_.empty()) return;
  average_buffers();
  evaluate_if_due(true);
  setup_.stage->save(setup_.trained_path);
  if (dropped_ > 0) {
    spdlog::info("parameter server: {} gradient pushes dropped ({})", dropped_,
                 options_.ps.mode == config::PsMode::kAsync ? "too stale" : "late");
  }
  finish(version_);
}

}  // namespace ravnest::worker
