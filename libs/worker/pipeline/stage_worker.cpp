// Long because: StageWorker drives every phase of a batch (enter, forward, backward, the leaf's
// loss, the update); its parts by role are files of their own (root_feeder, stage_rings,
// leaf_metrics, update_gradients, ...), and batch_finished runs the job's update plan.
#include "libs/worker/pipeline/stage_worker.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <spdlog/spdlog.h>

#include "libs/base/clock.h"
#include "libs/store/checkpoint_store.h"
#include "libs/worker/compute_device.h"
#include "libs/worker/pipeline/leaf_metrics.h"
#include "libs/worker/pipeline/ring_work.h"
#include "libs/worker/ps/embedding_rows.h"
#include "libs/worker/ps/ps_exchange.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/random_state.h"
#include "libs/training/schedule.h"

namespace ravnest::worker {

namespace {

// The facts of this node's update plan: its role, its stage's rings, the job's update knobs.
training::UpdateFacts update_facts(const WorkerSetup& setup) {
  training::UpdateFacts facts;
  facts.clusters = setup.cluster_count;
  facts.reduce = setup.reduce;
  facts.reduce_factor = setup.reduce_factor;
  const bool worker = setup.node.role == config::Role::kWorker;  // of parameter servers
  facts.parameter_servers = worker && !setup.node.parameter_server.hybrid();
  facts.embedding_rows = worker && setup.node.parameter_server.hybrid();
  facts.shared_tensors = !setup.shared_rings.empty();
  facts.loss_scaler = setup.autocast == config::Autocast::kFp16;
  facts.clip = setup.grad_clip_norm.has_value() || setup.grad_clip_value.has_value();
  if (setup.outer) facts.outer_every = setup.outer->every;
  facts.save_every = setup.save_every;
  return facts;
}

}  // namespace

StageWorker::StageWorker(WorkerSetup setup, Options options, WorkerPort& port)
    : WorkerBase(std::move(setup), port, AfterFinish::kGoOn),
      options_(std::move(options)),
      deterministic_(setup_.deterministic),
      transfers_(setup_.device,
                 [this](TransferMessage message) { port_.send(std::move(message)); }),
      input_slots_(setup_.node),
      random_(setup_.node, setup_.device),
      rings_(setup_, port_, transfers_),
      stash_(setup_.stage),
      gradients_(setup_, port_) {
  if (is_root()) {
    feeder_ = std::make_unique<RootFeeder>(setup_, options_.root, static_cast<FeedTarget&>(*this));
  }
  if (is_leaf()) {
    std::optional<std::string> validation;
    if (setup_.resume && setup_.resume->has_validation) validation = setup_.resume->validation;
    metrics_ = std::make_unique<LeafMetrics>(options_.leaf.losses_path, port_,
                                             setup_.resume ? setup_.resume->losses : "",
                                             std::move(validation));
  }
  if (setup_.optimizer) setup_.optimizer->zero_grad();
  if (setup_.node.role == config::Role::kWorker) {
    if (setup_.node.parameter_server.hybrid()) {
      rows_ = std::make_unique<EmbeddingRows>(setup_, port_);
    } else {
      servers_ = std::make_unique<ServerExchange>(setup_.node, setup_.job_id, port_);
    }
  }
  if (setup_.outer && !servers_) outer_ = std::make_unique<OuterStep>(setup_, rings_);
  plan_ = training::make_update_plan(update_facts(setup_));
  for (const auto& p : setup_.stage->parameters()) state_storages_.insert(p.storage().data());
  for (const auto& b : setup_.stage->buffers()) state_storages_.insert(b.storage().data());
}

// A sent tensor's bytes may leave the process after the call returns (messages reference
// memory, large tensors stream), so an output that is (a view of) the stage's own state, which
// the next optimizer step or BatchNorm update writes in place, is sent as a copy of what the
// forward saw. Other outputs are fresh memory that nothing writes to again.
at::Tensor StageWorker::sendable(const at::Tensor& output) const {
  at::Tensor t = output.detach();
  if (t.has_storage() && state_storages_.count(t.storage().data())) t = t.clone();
  return t;
}

StageWorker::~StageWorker() = default;

std::string StageWorker::failure_message(const std::exception& e) const {
  // A device out of memory stops the job like any error, saying where: the daemon lives on
  // and the memory goes back when the worker does.
  if (auto tried = out_of_memory(e)) {
    return transfers_.device().str() + " out of memory" +
           (doing_.empty() ? "" : " during " + doing_) +
           (tried->empty() ? "" : " (" + *tried + ")");
  }
  return torch_support::torch_message(e);  // one line: a LibTorch error without its backtrace
}

namespace {

// "forward of micro-batch 3 of batch 12": what an out-of-memory error happened during.
std::string micro_batch_activity(const char* what, const MicroBatchTag& batch) {
  return std::string(what) + " of " + (batch.validate ? "validation " : "") + "micro-batch " +
         std::to_string(batch.index) + " of batch " + std::to_string(batch.step);
}

}  // namespace

void StageWorker::on_failure() {
  transfers_.drop();
  micro_.clear();
  random_.clear();
}

template <typename F>
void StageWorker::timed(F&& work) {
  const double begin = base::now_seconds();
  try {
    work();
  } catch (...) {
    busy_seconds_ += base::now_seconds() - begin;
    throw;
  }
  busy_seconds_ += base::now_seconds() - begin;
}

void StageWorker::start() {
  started_at_ = base::now_seconds();
  spdlog::info("node {}: the job's mode: {}", setup_.node.node_id, training::describe(plan_));
  guarded([&] {
    if (setup_.resume) {
      resume_from(*setup_.resume);
    } else {
      // Every node starts from the job's seed, as the single-process run does: dropout in a
      // stage then draws what the whole model would have drawn there.
      torch::manual_seed(setup_.seed);
      random_.start();
    }
    if (!feeder_) return;
    const uint64_t total = feeder_->start();
    if (setup_.resume) feeder_->skip(setup_.resume->batches);
    set_status([&](WorkerStatus& s) { s.total_batches = total; });
    // The validation round that followed the checkpoint's update is not in it (the leaf's
    // checkpoint was taken before the round's answers came): it runs again, on the same weights.
    if (setup_.resume && setup_.resume->batches > 0 &&
        (training::validation_due(setup_.resume->updates, options_.root.val_freq, false) ||
         (options_.root.val_freq <= 0 && feeder_->epoch_ends_with(setup_.resume->batches - 1)))) {
      feeder_->run_validation_round();
    }
    begin_batch();
  });
}

void StageWorker::begin_batch() {
  switch (feeder_->begin_batch()) {
    case RootFeeder::Begin::kDone:
      return finish();
    case RootFeeder::Begin::kHeld:
      held_ = true;  // hold() moving the boundary further begins it again
      return;
    case RootFeeder::Begin::kStarted:
      break;
  }
  held_ = false;
  progress();
}

std::optional<uint64_t> StageWorker::hold(uint64_t target) {
  if (!feeder_) return std::nullopt;
  bool moved = false;
  const uint64_t boundary = feeder_->hold(target, &moved);
  if (moved) {
    // Another cluster reached further: feed on to the agreed boundary (rings need every cluster
    // at every update up to it).
    port_.defer([this] {
      guarded([this] {
        if (held_) {
          begin_batch();
        } else if (feeder_->asynchronous() && !finished()) {
          feeder_->pump();
          progress();
        }
      });
    });
  }
  return boundary;
}

// The root's own stage takes the model's inputs it is given; the labels go to the leaf, with
// the micro-batch they belong to.
void StageWorker::enter(const MicroBatchTag& tag, const std::vector<at::Tensor>& inputs,
                        const at::Tensor& labels) {
  Micro& m = micro(tag);
  for (size_t i = 0; i < setup_.node.inputs.size(); ++i) {
    const auto& input = setup_.node.inputs[i];
    if (!input.model_input) continue;
    const size_t k = static_cast<size_t>(*input.model_input);
    m.inputs[i] = k < inputs.size() ? transfers_.to_device(inputs[k]) : c10::IValue();
    m.have_input[i] = true;
  }
  if (is_leaf()) {
    m.labels = transfers_.to_device(labels).toTensor();
    return;
  }
  TransferMessage message = message_to(TransferKind::kLabels, setup_.leaf_node, tag);
  message.values.emplace_back(0, labels);
  transfers_.send(std::move(message));
}

// ---- every node -------------------------------------------------------------------------------

StageWorker::Micro& StageWorker::micro(const MicroBatchTag& batch) {
  Key key{batch.validate, batch.step, batch.index};
  auto it = micro_.find(key);
  if (it == micro_.end()) {
    Micro m;
    m.batch = batch;
    m.inputs.resize(setup_.node.inputs.size());
    m.have_input.assign(setup_.node.inputs.size(), false);
    it = micro_.emplace(key, std::move(m)).first;
  }
  return it->second;
}

void StageWorker::receive(TransferMessage message) {
  guarded([&] {
    check_job(message);
    if (message.kind == TransferKind::kRandomState) {
      random_.take(message);
      progress();
      return;
    }
    doing_ = "receiving from node " + std::to_string(message.from_node);
    for (auto& entry : message.values) entry.second = transfers_.to_device(entry.second);
    Micro& m = micro(message.batch);
    switch (message.kind) {
      case TransferKind::kActivations:
        for (auto& [output, value] : message.values) {
          const size_t slot = input_slots_.of(message.from_node, output);
          m.inputs[slot] = std::move(value);
          m.have_input[slot] = true;
        }
        break;
      case TransferKind::kLabels:
        if (message.values.empty() || !message.values[0].second.isTensor()) {
          throw std::runtime_error("labels without a tensor from node " +
                                   std::to_string(message.from_node));
        }
        m.labels = message.values[0].second.toTensor();
        break;
      case TransferKind::kRandomState:
        break;  // handled above
      default:  // the parameter-server kinds, kPredicted
        throw std::runtime_error("node " + std::to_string(message.from_node) +
                                 " sent a message a training stage does not take");
      case TransferKind::kGradients:
        if (m.output_grads.empty()) m.output_grads.resize(setup_.node.outputs.size());
        for (auto& [output, value] : message.values) {
          if (output >= m.output_grads.size() || !value.isTensor()) {
            throw std::runtime_error("node " + std::to_string(message.from_node) +
                                     " sent a gradient for output " + std::to_string(output));
          }
          auto& slot = m.output_grads[output];
          slot = slot.defined() ? slot + value.toTensor() : value.toTensor();
        }
        ++m.grads_received;
        break;
    }
    progress();
  });
}

bool StageWorker::ready_for_forward(const Micro& m) const {
  if (m.forwarded) return false;
  for (bool have : m.have_input) {
    if (!have) return false;
  }
  if (!random_.ready(m.batch)) return false;
  return !is_leaf() || m.labels.has_value();
}

void StageWorker::advance(Key& cursor, const MicroBatchTag& batch) {
  if (batch.index + 1 < batch.count) {
    cursor.index = batch.index + 1;
  } else {
    cursor.step = batch.step + 1;
    cursor.index = 0;
  }
}

// Runs every forward and backward that is ready, in micro-batch order.
void StageWorker::progress() {
  bool moved = true;
  while (moved && !failed()) {
    moved = false;
    for (Key* cursor : {&next_forward_train_, &next_forward_validate_}) {
      auto it = micro_.find(*cursor);
      if (it != micro_.end() && ready_for_forward(it->second)) {
        Micro& m = it->second;
        const MicroBatchTag batch = m.batch;
        advance(*cursor, batch);
        transfers_.poll();  // what earlier steps sent and the GPU has copied by now
        doing_ = micro_batch_activity("forward", batch);
        timed([&] { forward(m); });
        moved = true;
        if (batch.validate) micro_.erase(Key{true, batch.step, batch.index});
      }
    }
    auto it = micro_.find(next_backward_);
    if (it != micro_.end() && it->second.forwarded &&
        (is_leaf() || it->second.grads_received >= setup_.node.forward_neighbours.size())) {
      const MicroBatchTag batch = it->second.batch;
      advance(next_backward_, batch);
      transfers_.poll();
      doing_ = micro_batch_activity("backward", batch);
      timed([&] { backward(it->second); });
      micro_.erase(it);
      moved = true;
      if (batch.index + 1 == batch.count) {
        batch_finished(batch);
      } else if (feeder_) {
        feeder_->pump();  // 1F1B and async: a micro-batch came back, another may enter
      }
    }
  }
  // Nothing else is ready: every transfer still on its way to the host goes out now.
  if (!failed()) transfers_.flush();
}

void StageWorker::forward(Micro& m) {
  const bool train = !m.batch.validate;
  setup_.stage->train(train);
  std::optional<torch::NoGradGuard> no_grad;
  if (!train) no_grad.emplace();
  std::vector<c10::IValue> args = m.inputs;
  if (train) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (!setup_.node.inputs[i].from_node || !args[i].isTensor()) continue;
      at::Tensor t = args[i].toTensor();
      if (t.is_floating_point()) {
        t = t.detach().requires_grad_(true);
        m.inputs[i] = t;  // keep the leaf: its .grad() goes back upstream
        args[i] = t;
      }
    }
  }
  const bool chained = train && random_.member();
  if (chained) random_.enter(m.batch);
  if (train && asynchronous() && !is_leaf()) {
    // Its backward may come after an update: what it needs to run this forward again.
    m.version = stash_.version();
    stash_.hold(m.version);
    const auto& drawing = setup_.node.random_nodes;
    if (std::find(drawing.begin(), drawing.end(), setup_.node.node_id) != drawing.end()) {
      m.random_state = training::random_state(setup_.device);
    }
    if (options_.record_versions) m.checksum = stash_.checksum();
  }
  EmbeddingRows::Lookup looked;
  if (rows_) {
    transfers_.flush();  // the lookup blocks
    looked = rows_->look_up(m.batch, args, train);
  }
  c10::IValue result;
  try {
    auto precision = autocast();
    result = setup_.stage->forward(args);
  } catch (...) {
    if (rows_) rows_->put_back_placeholders();
    throw;
  }
  if (rows_) rows_->put_back_placeholders();  // the graph keeps the rows it used
  m.forwarded = true;
  if (auto next = chained ? random_.next(m.batch) : std::nullopt) {
    TransferMessage message = message_to(TransferKind::kRandomState, next->first, next->second);
    message.values.emplace_back(0, training::random_state(setup_.device));
    transfers_.send(std::move(message));
  }

  if (is_leaf()) {
    leaf_loss(m, result);
    if (rows_ && train) rows_->collect_gradients(looked);
    return;
  }

  const auto& items = result.toTupleRef().elements();
  if (train) m.outputs.assign(items.begin(), items.end());
  // Each consumer gets the outputs it takes, in one transfer.
  for (int consumer : setup_.node.forward_neighbours) {
    TransferMessage message = message_to(TransferKind::kActivations, consumer, m.batch);
    for (size_t j = 0; j < setup_.node.outputs.size(); ++j) {
      const auto& to = setup_.node.outputs[j].to_nodes;
      if (std::find(to.begin(), to.end(), consumer) == to.end()) continue;
      c10::IValue value = items[j];
      if (value.isTensor()) value = sendable(value.toTensor());
      message.values.emplace_back(static_cast<uint32_t>(j), std::move(value));
    }
    transfers_.send(std::move(message));
  }
}

// The loss and its backward run at once: the leaf has no consumer to wait for.
void StageWorker::leaf_loss(Micro& m, const c10::IValue& result) {
  const at::Tensor labels = *m.labels;
  const training::Loss& loss_of = *options_.leaf.loss;
  if (!m.batch.validate) {
    // With ignored labels in the batch, the micro-batch weighs the labels that count (loss.h);
    // one whose labels are all ignored adds nothing (its mean is 0/0; its backward, weighted 0,
    // still sends the zero gradients upstream that the pipeline waits for).
    double share = static_cast<double>(m.batch.samples) / m.batch.batch_samples;
    int64_t counted = -1;
    if (m.batch.batch_counted) {
      counted = training::counted_labels(labels, loss_of.spec());
      share = static_cast<double>(counted) / static_cast<double>(m.batch.batch_counted);
    }
    at::Tensor loss;
    {
      auto precision = autocast();
      loss = loss_of(result, labels);
    }
    double weight = 0;
    if (counted > 0) {
      weight = training::micro_batch_loss_weight(
          counted, static_cast<int64_t>(m.batch.batch_counted), setup_.update_frequency);
    } else if (counted < 0) {
      weight = training::micro_batch_loss_weight(m.batch.samples, m.batch.batch_samples,
                                                 setup_.update_frequency);
    }
    at::Tensor weighted = loss * weight;
    // fp16: GradScaler.scale(loss); every stage's gradients are unscaled before the update.
    if (gradients_.loss_scale() != 1.0) weighted = weighted * gradients_.loss_scale();
    weighted.backward();
    if (keeps_shared_shares()) rings_.keep_shared_shares();
    metrics_->add_training(m.batch, counted == 0 ? 0 : loss.item<double>(), share);
    return;
  }
  const int64_t counted = training::counted_labels(labels, loss_of.spec());
  double loss = 0;
  if (counted != 0) {
    auto precision = autocast();
    loss = loss_of(result, labels).item<double>();
  }
  if (metrics_->add_validation(m.batch, loss, counted >= 0 ? counted : m.batch.samples, result,
                               labels, loss_of.spec(), updates_done_) &&
      training_done_) {
    finish();
  }
}

// The first forward's graph refers to parameters that an update has since changed in place: the
// forward runs again on the weights it ran on, from the same inputs and random state, and its
// graph replaces the first one's (the caller's backward then runs on the same weights).
void StageWorker::recompute_forward(Micro& m, stage::Stage& module) {
  std::vector<c10::IValue> args = m.inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!setup_.node.inputs[i].from_node || !m.inputs[i].isTensor()) continue;
    at::Tensor t = m.inputs[i].toTensor();
    if (t.requires_grad()) {
      t = t.detach().requires_grad_(true);  // fresh leaves: their .grad() goes upstream
      m.inputs[i] = t;
      args[i] = t;
    }
  }
  std::optional<at::Tensor> generator;
  if (m.random_state) {
    generator = training::random_state(setup_.device);
    training::set_random_state(setup_.device, *m.random_state);
  }
  module.train(true);
  c10::IValue result;
  {
    auto precision = autocast();
    result = module.forward(args);
  }
  // The stream goes on as if never redrawn.
  if (generator) training::set_random_state(setup_.device, *generator);
  const auto& items = result.toTupleRef().elements();
  m.outputs.assign(items.begin(), items.end());
}

// The backward of a non-leaf stage's outputs from the gradients its consumers sent.
void StageWorker::backward_outputs(Micro& m) {
  std::vector<at::Tensor> tensors, grads;
  for (size_t j = 0; j < m.outputs.size() && j < m.output_grads.size(); ++j) {
    if (!m.outputs[j].isTensor() || !m.output_grads[j].defined()) continue;
    const at::Tensor& out = m.outputs[j].toTensor();
    if (!out.requires_grad()) continue;
    tensors.push_back(out);
    grads.push_back(m.output_grads[j]);
  }
  if (!tensors.empty()) torch::autograd::backward(tensors, grads);
}

void StageWorker::backward(Micro& m) {
  if (!is_leaf() && asynchronous() && !m.batch.validate) {
    // On the weights its forward ran on: recomputed there if an update came between.
    const uint64_t current = stash_.version();
    stash_.with_version(m.version, [&](stage::Stage& module) {
      if (m.version != current) recompute_forward(m, module);
      if (options_.record_versions) {
        backward_records_.push_back({m.batch.step, m.batch.index, m.version, current, m.checksum,
                                     WeightStash::checksum(module)});
      }
      backward_outputs(m);
    });
    stash_.release(m.version);
  } else if (!is_leaf()) {
    backward_outputs(m);
    if (keeps_shared_shares()) rings_.keep_shared_shares();
  }
  send_gradients(m);
  if (feeder_) feeder_->micro_batch_done(m.batch.samples);
}

TransferMessage StageWorker::message_to(TransferKind kind, int to, const MicroBatchTag& batch) const {
  TransferMessage message = wire::addressed(kind, setup_.node.node_id, to, batch);
  if (kind == TransferKind::kActivations) message.codec = setup_.compression.activations;
  if (kind == TransferKind::kGradients) message.codec = setup_.compression.gradients;
  return message;
}

void StageWorker::send_gradients(const Micro& m) {
  for (int producer : setup_.node.backward_neighbours) {
    TransferMessage message = message_to(TransferKind::kGradients, producer, m.batch);
    for (size_t i = 0; i < setup_.node.inputs.size(); ++i) {
      const auto& input = setup_.node.inputs[i];
      if (!input.from_node || *input.from_node != producer || !m.inputs[i].isTensor()) continue;
      at::Tensor grad = m.inputs[i].toTensor().grad();
      if (grad.defined()) message.values.emplace_back(input.from_output, grad);
    }
    transfers_.send(std::move(message));
  }
}

void StageWorker::batch_finished(const MicroBatchTag& batch) {
  // What follows may block (rings, servers) on peers that wait for these.
  transfers_.flush();
  doing_ = "the update after batch " + std::to_string(batch.step);
  ++batches_done_;
  while (current_epoch_ < batch.epoch) {
    if (setup_.lr_schedule) setup_.lr_schedule->on_epoch_end();
    ++current_epoch_;
  }
  // The lr this batch trains with, before its update moves the schedule on (metrics files).
  const double lr = setup_.lr_schedule && setup_.optimizer ? setup_.lr_schedule->lr() : std::nan("");
  UpdateRun run{batch};
  const bool updated = training::update_due(batches_done_, setup_.update_frequency, batch.last);
  if (updated) {
    boundary_valid_ = false;  // the parameters are about to change
    run_steps(plan_.update, run);
  }
  set_status([&](WorkerStatus& s) {
    s.epoch = batch.epoch;
    s.batches = batches_done_;
    s.updates = updates_done_;
    if (metrics_) s.last_loss = metrics_->batch_loss();
    if (feeder_) s.samples_per_second = feeder_->samples_per_second();
    s.busy_seconds = busy_seconds_;
    s.running_seconds = base::now_seconds() - started_at_;
  });
  if (metrics_) metrics_->batch_finished(batch, batches_done_, lr);
  // An update boundary: what a checkpoint holds, now or when the job is stopped before the next
  // one. The last batch needs none: the job is done.
  if (updated && !batch.last) run_steps(plan_.boundary, run);
  if (batch.last) {
    training_done_ = true;
    run_steps(plan_.end, run);
  }
  schedule_next_batch(batch, updated);
}

void StageWorker::run_steps(const std::vector<training::UpdateStep>& steps, UpdateRun& run) {
  for (const auto& step : steps) run_step(step, run);
}

void StageWorker::run_step(const training::UpdateStep& step, UpdateRun& run) {
  using training::StepKind;
  switch (step.kind) {
    case StepKind::kServerExchange: servers_->exchange(*setup_.stage, updates_done_, run.batch); break;
    case StepKind::kSumSharedGradients: rings_.sum_shared_gradients(); break;
    case StepKind::kReduceGradients: reduce_across_clusters(RingTensors::kGradients); break;
    // Unscaled and clipped as the whole model's would be; skipped on every stage at once.
    case StepKind::kUnscaleAndClip: run.step = gradients_.prepare(); break;
    case StepKind::kOptimizerStep: optimizer_step(run); break;
    case StepKind::kScalerUpdate: gradients_.after_step(run.step); break;
    case StepKind::kPushRows: rows_->push_gradients(updates_done_, run.batch); break;
    case StepKind::kZeroGrad: setup_.optimizer->zero_grad(); break;
    case StepKind::kLrOnUpdate:
      if (setup_.lr_schedule) setup_.lr_schedule->on_update();
      break;
    case StepKind::kCountUpdate: ++updates_done_; break;
    case StepKind::kOuterStep: outer_step(run); break;
    case StepKind::kAverageParameters:
      if (training::due_every(step.every, updates_done_)) reduce_across_clusters(RingTensors::kState);
      break;
    case StepKind::kSaveStage:
      if (training::due_every(step.every, updates_done_)) save_stage();
      break;
    case StepKind::kMarkBoundary: mark_boundary(); break;
    case StepKind::kWriteCheckpoint:
      if (training::due_every(step.every, updates_done_)) write_checkpoint();
      break;
    case StepKind::kAverageFinal: reduce_across_clusters(RingTensors::kFinal); break;
    case StepKind::kSaveTrained: save_stage(); break;
  }
}

void StageWorker::optimizer_step(const UpdateRun& run) {
  if (run.step) timed([&] { update_weights([&] { setup_.optimizer->step(); }); });
}

// DiLoCo: every `every` updates and after the last (OuterOptimizer::due).
void StageWorker::outer_step(const UpdateRun& run) {
  if (!outer_->due(updates_done_, run.batch.last)) return;
  outer_->run([this](const std::function<void()>& change) { update_weights(change); });
}

// After a batch: a validation round when one is due, then the next batch (or the end).
void StageWorker::schedule_next_batch(const MicroBatchTag& batch, bool updated) {
  if (feeder_) {
    if ((updated && training::validation_due(updates_done_, options_.root.val_freq, false)) ||
        (options_.root.val_freq <= 0 && feeder_->epoch_ends_with(batch.step)) || batch.last) {
      feeder_->run_validation_round();  // a one-node cluster finishes inside, at the last round
    }
  }
  if (batch.last) {
    if (!(is_leaf() && options_.leaf.has_validation)) finish();
    return;
  }
  if (feeder_ && feeder_->asynchronous()) {
    // Batches went on entering; after a validation round they may again.
    feeder_->release_hold();
    feeder_->pump();
    return;
  }
  // The next batch starts from the event loop, not from inside this one's call chain.
  if (feeder_) port_.defer([this] { guarded([this] { begin_batch(); }); });
}

torch_support::AutocastScope StageWorker::autocast() const {
  return torch_support::AutocastScope(
      setup_.device.type(), setup_.autocast != config::Autocast::kOff,
      setup_.autocast == config::Autocast::kFp16 ? at::kHalf : at::kBFloat16);
}

void StageWorker::update_weights(const std::function<void()>& change) {
  if (!asynchronous()) return change();
  stash_.before_update();
  most_versions_kept_ = std::max(most_versions_kept_, stash_.versions_kept());
  // The graphs of forwards in flight refer to the weights about to change: useless now (their
  // backward recomputes), so their memory goes.
  for (auto& [key, m] : micro_) {
    if (m.forwarded && !key.validate && m.version == stash_.version()) m.outputs.clear();
  }
  change();
  stash_.after_update();
}

void StageWorker::reduce_across_clusters(RingTensors what) {
  rings_.reduce_across_clusters(what, [this](const std::function<void()>& change) {
    update_weights(change);
  });
}

void StageWorker::save_stage() { setup_.stage->save(setup_.trained_path); }

// Finished nodes keep forwarding: the final validation round may still be on its way.
void StageWorker::finish() {
  if (over()) return;
  transfers_.flush();  // the last transfers go before the node says it is done
  // `ravnest resume` of a finished job says so instead of training it again.
  if (setup_.checkpoints && !setup_.identity.empty()) {
    setup_.checkpoints->mark_finished(setup_.identity);
  }
  ProgressEventData event;
  event.epoch = current_epoch_;
  event.step = updates_done_;
  event.samples = feeder_ ? feeder_->samples_done() : 0;
  report_finished(event);
}

}  // namespace ravnest::worker
