#include "libs/worker/ps/ps_evaluator.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/autograd/grad_mode.h>

#include "libs/base/atomic_file.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/training/evaluate.h"

namespace ravnest::worker {

PsEvaluator::PsEvaluator(WorkerSetup setup, Options options, WorkerPort& port)
    : WorkerBase(std::move(setup), port), options_(std::move(options)) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : setup_.stage->named_parameters()) state.emplace(p.name, p.value);
  for (const auto& b : setup_.stage->named_buffers()) state.emplace(b.name, b.value);
  for (const auto& server : setup_.node.parameter_server.servers) {
    auto& tensors = shard_tensors_[server.node];
    for (const auto& name : server.tensors) {
      auto it = state.find(name);
      if (it == state.end()) {
        throw std::runtime_error("the plan's shard of node_" + std::to_string(server.node) +
                                 " names " + name + ", which the model lacks");
      }
      tensors.push_back(it->second);
    }
  }
  if (!options_.validation_data || !options_.loss) {
    throw std::runtime_error("the evaluator needs the job's validation data and loss");
  }
}

void PsEvaluator::start() {
  // The last job's rounds are not this one's.
  if (!options_.validation_path.empty()) base::write_file_atomically(options_.validation_path, "");
  set_status([](WorkerStatus& s) { s.state = WorkerStatus::State::kRunning; });
}

void PsEvaluator::receive(TransferMessage message) {
  guarded([&] {
    if (message.kind != TransferKind::kPsWeights || !shard_tensors_.count(message.from_node)) {
      throw std::runtime_error("the evaluator takes its servers' weights, not this message from "
                               "node " + std::to_string(message.from_node));
    }
    const auto& tensors = shard_tensors_.at(message.from_node);
    for (const auto& [index, value] : message.values) {
      if (index >= tensors.size() || !value.isTensor() ||
          value.toTensor().sizes() != tensors[index].sizes()) {
        throw std::runtime_error(config::node_name(message.from_node) +
                                 " sent a tensor that does not fit its shard's tensor " +
                                 std::to_string(index));
      }
    }
    // Every server sends the same rounds (under async their versions may differ a little).
    const uint64_t round = message.update();
    const bool last = message.batch.last;
    auto& shards = waiting_[round];
    shards[message.from_node] = std::move(message);
    if (shards.size() < shard_tensors_.size()) return;
    score(shards, last);
    waiting_.erase(waiting_.begin(), waiting_.upper_bound(round));
  });
}

void PsEvaluator::score(std::map<int, TransferMessage>& shards, bool last) {
  uint64_t version = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& [server, message] : shards) {
      auto& tensors = shard_tensors_.at(server);
      for (const auto& [index, value] : message.values) tensors[index].copy_(value.toTensor());
      version = std::max(version, message.batch.version);
    }
  }
  const training::Evaluation result =
      evaluate(*setup_.stage, *options_.validation_data, *options_.loss, options_.batch_size);
  set_status([&](WorkerStatus& s) {
    s.updates = version;
    s.last_loss = result.loss;
  });
  ProgressEventData event;
  event.kind = EventKind::kValidation;
  event.step = version;
  event.epoch = shards.begin()->second.batch.epoch;
  event.loss = result.loss;
  event.accuracy = result.accuracy;
  event.samples = static_cast<uint64_t>(result.samples);
  port_.event(event);
  std::ostringstream line;
  line << version << ' ' << event.epoch << ' ' << event.loss << ' ' << event.accuracy << '\n';
  validation_ += line.str();
  if (!options_.validation_path.empty()) {
    base::write_file_atomically(options_.validation_path, validation_);
  }
  if (last) finish(version);
}

}  // namespace ravnest::worker
