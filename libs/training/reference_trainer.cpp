// The one-process reference (train_reference); its clusters are cluster_reference.cpp's.
#include "libs/training/reference_trainer.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>

#include "libs/base/clock.h"
#include "libs/data/batch_order.h"
#include "libs/data/dataset.h"
#include "libs/data/epoch_orders.h"
#include "libs/stage/torchscript_stage.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/torch_support/module_file.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"
#include "libs/training/update_plan.h"

namespace ravnest::training {
using base::now_seconds;

std::map<std::string, at::Tensor> state_of(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) state[p.name] = p.value.detach().clone();
  for (const auto& b : module.named_buffers(/*recurse=*/true)) state[b.name] = b.value.detach().clone();
  return state;
}

ReferenceResult train_reference(const std::string& model_path, const config::JobSpec& job,
                                int64_t max_batches) {
  at::manual_seed(static_cast<uint64_t>(job.train.seed));
  torch::jit::Module module = torch_support::load_module(model_path);
  return train_reference(module, job, max_batches);
}

namespace {

data::BatchOrder batch_order(const config::JobSpec& job, const data::Dataset& train) {
  const config::TrainSpec& t = job.train;
  if (job.data.order.empty()) {
    return data::BatchOrder(train.size(), t.batch_size, t.seed, t.shuffle, t.drop_last);
  }
  return data::BatchOrder(data::read_epoch_orders(job.data.order.resolved, train.size(), t.epochs),
                          t.batch_size, t.drop_last);
}

// The forward and backward of one batch's micro-batches; returns the batch's loss.
double train_one_batch(torch::jit::Module& module, const Loss& loss, const data::Batch& batch,
                       const config::TrainSpec& t, int64_t batch_number) {
  const int64_t n = batch.size();
  double batch_loss = 0;
  // With ignored labels the micro-batches weigh the labels that count (loss.h).
  const int64_t batch_counted = counted_labels(batch.labels, loss.spec());
  const bool by_labels = weigh_by_labels(batch_counted, batch.labels.numel());
  for (const auto& [begin, end] : data::split_micro_batches(n, t.micro_batches)) {
    const data::Batch micro = batch.slice(begin, end);
    std::vector<c10::IValue> inputs(micro.inputs.begin(), micro.inputs.end());
    c10::IValue output;
    at::Tensor value;
    try {
      output = module.forward(inputs);
      value = loss(output, micro.labels);
    } catch (const c10::Error& e) {
      throw std::runtime_error("training batch " + std::to_string(batch_number) + ": " +
                               torch_support::torch_message(e));
    }
    const int64_t counted = by_labels ? counted_labels(micro.labels, loss.spec()) : -1;
    const double weight =
        !by_labels  ? micro_batch_loss_weight(end - begin, n, t.update_frequency)
        : counted   ? micro_batch_loss_weight(counted, batch_counted, t.update_frequency)
                    : 0;  // every label ignored: a mean of 0/0 that adds nothing
    const at::Tensor weighted = value * weight;
    weighted.backward();
    if (weight > 0) batch_loss += weighted.item<double>();
  }
  return batch_loss;
}

// One process's update: the plan of one cluster without [outer], tables or files (clipping as
// the job says), each step on the one optimizer.
void run_single_steps(const std::vector<UpdateStep>& steps, const config::TrainSpec& t,
                      torch::optim::Optimizer& optimizer, LrSchedule& schedule,
                      ReferenceResult& result) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case StepKind::kUnscaleAndClip: clip_as_job_says(t, optimizer); break;
      case StepKind::kOptimizerStep: optimizer.step(); break;
      case StepKind::kZeroGrad: optimizer.zero_grad(); break;
      case StepKind::kLrOnUpdate: schedule.on_update(); break;
      case StepKind::kCountUpdate: ++result.updates; break;
      default: break;  // not in one process's plan, or nothing to do in it (files)
    }
  }
}

}  // namespace

ReferenceResult train_reference(torch::jit::Module& module, const config::JobSpec& job,
                                int64_t max_batches) {
  const torch_support::EagerNumerics eager;  // as the daemons' stages compute
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
  UpdateFacts facts;
  facts.clip = t.grad_clip_norm.has_value() || t.grad_clip_value.has_value();
  const UpdatePlan plan = make_update_plan(facts);

  const data::BatchOrder order = batch_order(job, train);
  int64_t total = order.batches_per_epoch() * t.epochs;
  if (t.max_steps) total = std::min(total, *t.max_steps);
  if (max_batches >= 0) total = std::min(total, max_batches);

  ReferenceResult result;
  int64_t pending = 0;  // batches accumulated since the last update
  double started = now_seconds();
  // Validation after the training so far (its time not counted as training).
  auto validate = [&](int64_t epoch) {
    result.train_seconds += now_seconds() - started;
    if (validation) {
      ValidationPoint point;
      point.epoch = epoch;
      point.batches = result.batches;
      point.updates = result.updates;
      stage::TorchScriptStage whole(module);  // the same module, not a copy
      point.result = evaluate(whole, *validation, loss, t.batch_size);
      result.validations.push_back(point);
    }
    started = now_seconds();
  };
  for (int64_t epoch = 0; epoch < t.epochs && result.batches < total; ++epoch) {
    ++result.epochs_started;
    const auto batches = order.epoch(epoch);
    for (size_t b = 0; b < batches.size() && result.batches < total; ++b) {
      const data::Batch batch = train.get(batches[b]);
      const double batch_loss = train_one_batch(module, loss, batch, t, result.batches + 1);
      result.batch_losses.push_back(batch_loss * t.update_frequency);
      result.samples += batch.size();
      ++result.batches;
      ++pending;
      const bool last = result.batches == total;
      bool validated = false;
      if (pending == t.update_frequency || last) {
        result.update_lrs.push_back(schedule.lr());
        run_single_steps(plan.update, t, *optimizer, schedule, result);
        pending = 0;
        if (t.val_freq > 0 && result.updates % t.val_freq == 0) {
          validate(epoch);
          validated = true;
        }
      }
      if (b + 1 == batches.size()) {  // the epoch's end
        schedule.on_epoch_end();
        if (t.val_freq == 0) {
          validate(epoch);
          validated = true;
        }
      }
      if (last && !validated) validate(epoch);
    }
  }
  result.train_seconds += now_seconds() - started;
  result.samples_per_second = result.train_seconds > 0 ? result.samples / result.train_seconds : 0;
  result.state = state_of(module);
  return result;
}

}  // namespace ravnest::training
