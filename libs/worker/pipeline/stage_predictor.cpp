#include "libs/worker/pipeline/stage_predictor.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"
#include "libs/worker/compute_device.h"
#include "libs/data/batch_order.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/predictions.h"

namespace ravnest::worker {

using wire::EventKind;
using wire::ProgressEventData;

StagePredictor::StagePredictor(WorkerSetup setup, Options options, WorkerPort& port)
    : WorkerBase(std::move(setup), port, AfterFinish::kGoOn),
      options_(std::move(options)),
      input_slots_(setup_.node) {
  setup_.stage->eval();
  // Enough to keep every stage busy while the outputs travel, few enough to bound what waits.
  window_ = std::max<size_t>(4, 2 * setup_.node.pipeline.size());
  // What an earlier prediction left must not pass for this one's.
  if (is_leaf()) std::filesystem::remove(options_.predictions_path);
}

std::string StagePredictor::failure_message(const std::exception& e) const {
  if (auto tried = out_of_memory(e)) {  // the job stops, the daemon lives on
    return setup_.device.str() + " out of memory during prediction" +
           (tried->empty() ? "" : " (" + *tried + ")");
  }
  return torch_support::torch_message(e);
}

void StagePredictor::on_failure() {
  waiting_.clear();
  outputs_.clear();
}

void StagePredictor::start() {
  started_at_ = base::now_seconds();
  guarded([&] {
    if (!is_root()) return;
    if (!options_.data || options_.data->size() == 0) {
      throw std::runtime_error("the data to predict on holds no sample");
    }
    data::BatchOrder order(options_.data->size(), options_.batch_size, 0, /*shuffle=*/false,
                           /*drop_last=*/false);
    batches_ = order.epoch(0);
    set_status([&](WorkerStatus& s) { s.total_batches = batches_.size(); });
    pump();
  });
}

void StagePredictor::pump() {
  while (!failed() && in_flight_ < window_ && next_batch_ < batches_.size()) {
    if (next_micro_ == 0) {
      auto batch = options_.data->get(batches_[next_batch_]);
      batch_inputs_ = std::move(batch.inputs);
      ranges_ = data::split_micro_batches(static_cast<int64_t>(batches_[next_batch_].size()),
                                          options_.micro_batches);
    }
    MicroBatchTag tag;
    tag.job_id = setup_.job_id;
    tag.validate = true;  // no autograd anywhere: what validation forwards are
    tag.step = next_batch_;
    tag.index = next_micro_;
    tag.count = static_cast<uint32_t>(ranges_.size());
    tag.batch_samples = static_cast<uint32_t>(batches_[next_batch_].size());
    tag.last = next_batch_ + 1 == batches_.size();
    const auto [begin, end] = ranges_[next_micro_];
    tag.samples = static_cast<uint32_t>(end - begin);
    Micro m;
    m.batch = tag;
    m.inputs.resize(setup_.node.inputs.size());
    m.have.assign(setup_.node.inputs.size(), true);
    for (size_t i = 0; i < setup_.node.inputs.size(); ++i) {
      const auto& input = setup_.node.inputs[i];
      if (!input.model_input) continue;
      const size_t k = static_cast<size_t>(*input.model_input);
      if (k < batch_inputs_.size()) {
        m.inputs[i] = batch_inputs_[k].slice(0, begin, end).to(setup_.device);
      }
    }
    if (++next_micro_ == ranges_.size()) {
      next_micro_ = 0;
      ++next_batch_;
    }
    ++in_flight_;
    const bool batch_done = next_micro_ == 0;
    forward(std::move(m));
    if (batch_done && is_leaf()) {
      // One node does it all: the next batch from the event loop, so that a stop gets in.
      port_.defer([this] { guarded([this] { pump(); }); });
      return;
    }
  }
}

StagePredictor::Micro& StagePredictor::micro(const MicroBatchTag& batch) {
  auto [it, fresh] = waiting_.try_emplace(Key{batch.step, batch.index});
  if (fresh) {
    it->second.batch = batch;
    it->second.inputs.resize(setup_.node.inputs.size());
    it->second.have.assign(setup_.node.inputs.size(), false);
  }
  return it->second;
}

void StagePredictor::receive(TransferMessage message) {
  guarded([&] {
    check_job(message);
    if (message.kind == TransferKind::kPredicted && is_root()) {
      if (in_flight_ == 0) {
        throw std::runtime_error("node " + std::to_string(message.from_node) +
                                 " reported a micro-batch that was not sent");
      }
      --in_flight_;
      micro_batch_done(message.batch);
      return pump();
    }
    if (message.kind != TransferKind::kActivations) {
      throw std::runtime_error("node " + std::to_string(message.from_node) +
                               " sent a message a prediction job does not take");
    }
    Micro& m = micro(message.batch);
    for (auto& [output, value] : message.values) {
      const size_t slot = input_slots_.of(message.from_node, output);
      m.inputs[slot] = to_device(value, setup_.device);
      m.have[slot] = true;
    }
    if (std::all_of(m.have.begin(), m.have.end(), [](bool b) { return b; })) {
      const Key key{m.batch.step, m.batch.index};
      Micro ready = std::move(m);
      waiting_.erase(key);
      forward(std::move(ready));
    }
  });
}

void StagePredictor::forward(Micro m) {
  const double begin = base::now_seconds();
  c10::IValue result;
  {
    torch::NoGradGuard no_grad;
    result = setup_.stage->forward(m.inputs);
  }
  if (is_leaf()) {
    outputs_[Key{m.batch.step, m.batch.index}] = to_device(result, c10::Device(c10::kCPU));
    if (!is_root()) {
      port_.send(wire::addressed(TransferKind::kPredicted, setup_.node.node_id, setup_.root_node,
                                 m.batch));
    } else {
      --in_flight_;
    }
  } else {
    const auto& items = result.toTupleRef().elements();
    for (int consumer : setup_.node.forward_neighbours) {
      TransferMessage message = wire::addressed(TransferKind::kActivations, setup_.node.node_id,
                                                consumer, m.batch);
      message.codec = setup_.compression.activations;
      for (size_t j = 0; j < setup_.node.outputs.size() && j < items.size(); ++j) {
        const auto& to = setup_.node.outputs[j].to_nodes;
        if (std::find(to.begin(), to.end(), consumer) == to.end()) continue;
        c10::IValue value = items[j];
        if (value.isTensor()) value = value.toTensor().detach();
        message.values.emplace_back(static_cast<uint32_t>(j), std::move(value));
      }
      port_.send(std::move(message));
    }
  }
  busy_seconds_ += base::now_seconds() - begin;
  samples_ += m.batch.samples;
  // The root counts a micro-batch when the leaf reports it; the others when they sent it on.
  if (!is_root() || is_leaf()) micro_batch_done(m.batch);
}

void StagePredictor::micro_batch_done(const MicroBatchTag& batch) {
  auto& [count, done] = steps_[batch.step];
  count = batch.count;
  ++done;
  if (batch.last) last_step_ = batch.step;
  set_status([&](WorkerStatus& s) {
    s.batches = 0;
    for (const auto& [step, progress] : steps_) {
      if (progress.second == progress.first) ++s.batches;
    }
    s.busy_seconds = busy_seconds_;
    s.running_seconds = base::now_seconds() - started_at_;
    if (is_root()) s.samples_per_second = samples_ / std::max(s.running_seconds, 1e-9);
  });
  if (!last_step_ || steps_.size() != *last_step_ + 1) return;
  for (const auto& [step, progress] : steps_) {
    if (progress.second != progress.first) return;
  }
  finish();
}

void StagePredictor::write_predictions() {
  std::vector<c10::IValue> in_order;
  in_order.reserve(outputs_.size());
  for (auto& [key, value] : outputs_) in_order.push_back(std::move(value));
  outputs_.clear();
  base::write_file_atomically(options_.predictions_path,
                                training::predictions_file(training::join_predictions(in_order)));
}

void StagePredictor::finish() {
  if (over()) return;
  if (is_leaf()) write_predictions();
  ProgressEventData event;
  event.step = steps_.size();
  event.samples = samples_;
  report_finished(event);
}

}  // namespace ravnest::worker
