#include "libs/runtime/reference_trainer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/data/batch_order.h"
#include "libs/data/dataset.h"
#include "libs/runtime/loss.h"
#include "libs/runtime/lr_schedule.h"
#include "libs/runtime/optimizer.h"

namespace ravnest::runtime {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::map<std::string, at::Tensor> state_of(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) state[p.name] = p.value.detach().clone();
  for (const auto& b : module.named_buffers(/*recurse=*/true)) state[b.name] = b.value.detach().clone();
  return state;
}

ReferenceResult train_reference(const std::string& model_path, const config::JobSpec& job,
                                int64_t max_batches) {
  at::manual_seed(static_cast<uint64_t>(job.train.seed));
  torch::jit::Module module;
  try {
    module = torch::jit::load(model_path);
  } catch (const std::exception& e) {
    throw std::runtime_error(model_path + ": cannot load the TorchScript model: " + data::one_line_error(e));
  }
  return train_reference(module, job, max_batches);
}

ReferenceResult train_reference(torch::jit::Module& module, const config::JobSpec& job,
                                int64_t max_batches) {
  const config::TrainSpec& t = job.train;
  at::manual_seed(static_cast<uint64_t>(t.seed));
  const data::Dataset train = data::load_dataset(job.data, data::Split::kTrain);
  std::unique_ptr<data::Dataset> validation;
  if (!job.data.validation.empty()) {
    validation = std::make_unique<data::Dataset>(data::load_dataset(job.data, data::Split::kValidation));
  }
  const Loss loss(job.loss);
  module.train();
  std::vector<at::Tensor> parameters;
  for (const auto& p : module.parameters(/*recurse=*/true)) parameters.push_back(p);
  auto optimizer = make_optimizer(job.optimizer, parameters);
  LrSchedule schedule(*optimizer, job.scheduler);
  optimizer->zero_grad();

  data::BatchOrder order(train.size(), t.batch_size, t.seed, t.shuffle, t.drop_last);
  int64_t total = order.batches_per_epoch() * t.epochs;
  if (t.max_steps) total = std::min(total, *t.max_steps);
  if (max_batches >= 0) total = std::min(total, max_batches);

  ReferenceResult result;
  int64_t pending = 0;  // batches accumulated since the last update
  auto validate = [&](int64_t epoch) {
    if (!validation) return;
    ValidationPoint point;
    point.epoch = epoch;
    point.batches = result.batches;
    point.updates = result.updates;
    point.result = evaluate(module, *validation, loss, t.batch_size);
    result.validations.push_back(point);
  };

  double started = now_seconds();
  for (int64_t epoch = 0; epoch < t.epochs && result.batches < total; ++epoch) {
    ++result.epochs_started;
    const auto batches = order.epoch(epoch);
    for (size_t b = 0; b < batches.size() && result.batches < total; ++b) {
      const data::Batch batch = train.get(batches[b]);
      const int64_t n = batch.size();
      double batch_loss = 0;
      for (const auto& [begin, end] : data::split_micro_batches(n, t.micro_batches)) {
        const data::Batch micro = batch.slice(begin, end);
        std::vector<c10::IValue> inputs(micro.inputs.begin(), micro.inputs.end());
        c10::IValue output;
        at::Tensor value;
        try {
          output = module.forward(inputs);
          value = loss(output, micro.labels);
        } catch (const c10::Error& e) {
          throw std::runtime_error("training batch " + std::to_string(result.batches + 1) + ": " +
                                   data::one_line_error(e));
        }
        const at::Tensor weighted = value * micro_batch_loss_weight(end - begin, n, t.update_frequency);
        weighted.backward();
        batch_loss += weighted.item<double>();
      }
      result.batch_losses.push_back(batch_loss * t.update_frequency);
      result.samples += n;
      ++result.batches;
      ++pending;
      const bool last = result.batches == total;
      bool validated = false;
      if (pending == t.update_frequency || last) {
        result.update_lrs.push_back(schedule.lr());
        optimizer->step();
        optimizer->zero_grad();
        schedule.on_update();
        ++result.updates;
        pending = 0;
        if (t.val_freq > 0 && result.updates % t.val_freq == 0) {
          result.train_seconds += now_seconds() - started;
          validate(epoch);
          validated = true;
          started = now_seconds();
        }
      }
      const bool epoch_end = b + 1 == batches.size();
      if (epoch_end) {
        schedule.on_epoch_end();
        if (t.val_freq == 0) {
          result.train_seconds += now_seconds() - started;
          validate(epoch);
          validated = true;
          started = now_seconds();
        }
      }
      if (last && !validated) {
        result.train_seconds += now_seconds() - started;
        validate(epoch);
        started = now_seconds();
      }
    }
  }
  result.train_seconds += now_seconds() - started;
  result.samples_per_second = result.train_seconds > 0 ? result.samples / result.train_seconds : 0;
  result.state = state_of(module);
  return result;
}

}  // namespace ravnest::runtime
