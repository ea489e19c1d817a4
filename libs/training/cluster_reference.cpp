// train_reference_clusters (reference_trainer.h): data parallelism in one process, as
// ClusterReference, its copies of the model running the workers' update plan (update_plan.h)
// step by step; and the rings' and servers' averages to the bit.
#include "libs/training/reference_trainer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/base/clock.h"
#include "libs/data/batch_order.h"
#include "libs/data/dataset.h"
#include "libs/data/epoch_orders.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/torch_support/module_file.h"
#include "libs/training/checkpoint.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"
#include "libs/training/outer_optimizer.h"
#include "libs/training/sparse_optimizer.h"
#include "libs/training/tensor_average.h"
#include "libs/training/update_plan.h"

namespace ravnest::training {
using base::now_seconds;

namespace {

// One cluster's copy of the model in train_reference_clusters: its module, optimizer, schedule,
// data and RNG stream.
struct Copy {
  torch::jit::Module module;
  std::vector<at::Tensor> parameters;  // distinct, trainable, in module order
  std::vector<at::Tensor> buffers;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::vector<int64_t> shard;
  std::optional<data::BatchOrder> own_order;  // [data] order: this cluster's part of it
  at::Tensor rng_state;
  std::vector<at::Tensor> tables;  // in the order of `tables`
  bool live = true;                // training: not dropped (`dropped`), or rejoined
  std::vector<int64_t> drop_rounds;  // `dropped`'s rounds per ring (one: every ring); empty: none
  int64_t epochs_ended = 0;        // the schedule's on_epoch_end calls: the last batch's epoch
  std::unique_ptr<OuterOptimizer> outer;  // [outer] only
};

// The tensors of an average, each tagged with its state name, in the model's state order.
using Named = std::vector<std::pair<std::string, at::Tensor>>;

// The update plan of `count` copies: the job's, as one process per cluster runs it. No
// parameter servers (a [ps] job is emulated as data parallelism that reduces gradients, summed
// in the workers' order), no shared tensors (one whole model), no loss scaler (float32), and
// nothing saved (the result is the state).
UpdateFacts reference_facts(const config::JobSpec& job, int count, bool tables) {
  UpdateFacts facts;
  facts.clusters = count;
  facts.reduce = job.train.reduce;
  facts.reduce_factor = job.train.reduce_factor;
  facts.embedding_rows = tables;
  facts.clip = job.train.grad_clip_norm.has_value() || job.train.grad_clip_value.has_value();
  if (job.outer) facts.outer_every = job.outer->every;
  return facts;
}

// train_reference_clusters' run: the copies, and the update plan run on them step by step.
class ClusterReference {
 public:
  ClusterReference(const std::string& model_path, const config::JobSpec& job, int clusters,
                   int64_t max_batches, const std::vector<ReferenceTable>& tables,
                   const std::map<int, std::vector<int64_t>>& dropped,
                   const std::vector<ReferenceJoin>& joins,
                   const std::vector<std::vector<std::string>>& rings);
  ReferenceResult run();

 private:
  void make_copy(Copy& copy);
  void deal();
  void order_data();
  void train_batch(size_t b);
  void run_steps(const std::vector<UpdateStep>& steps, bool last);
  void run_step(const UpdateStep& step, bool last);
  void for_live(const std::function<void(Copy&)>& each);
  void count_update();
  void step_tables();
  void outer_step(bool last);
  void join(const ReferenceJoin& j);
  void take_state(Copy& into, const Copy& from);
  bool averages_in(const Copy& copy, size_t ring) const;
  void average(const std::vector<std::vector<at::Tensor>>& per_copy);
  void average_rings(const std::function<Named(Copy&)>& pick);
  Named state_tensors(Copy& copy, bool with_optimizer, bool gradients);
  std::vector<std::vector<at::Tensor>> gather(const std::function<std::vector<at::Tensor>(Copy&)>& pick);

  const std::string& model_path_;
  const config::JobSpec& job_;
  const config::TrainSpec& t_;
  const int64_t max_batches_;
  const std::vector<ReferenceTable>& tables_;
  const std::vector<ReferenceJoin>& joins_;
  const std::vector<std::vector<std::string>>& rings_;
  const torch_support::EagerNumerics eager_;  // as the daemons' stages compute
  const data::Dataset train_;
  const Loss loss_;
  std::vector<Copy> copies_;
  UpdatePlan plan_;  // the copies' count's: a join makes it anew
  std::vector<std::unique_ptr<training::SparseRowOptimizer>> table_optimizers_;
  std::vector<std::vector<at::Tensor>> looked_up_;  // per table: this update's indices
  at::Generator generator_ = at::detail::getDefaultCPUGenerator();
  std::optional<data::BatchOrder> order_;
  int64_t total_ = 0;
  ReferenceResult result_;
  int64_t pending_ = 0;      // batches accumulated since the last update
  int64_t dealt_epoch_ = -1;
  std::vector<std::vector<int64_t>> batches_;
  std::vector<std::vector<std::vector<int64_t>>> own_batches_;  // [data] order: per copy
};

void check_reference_arguments(const config::JobSpec& job, int clusters,
                               const std::vector<ReferenceTable>& tables,
                               const std::map<int, std::vector<int64_t>>& dropped,
                               const std::vector<ReferenceJoin>& joins,
                               const std::vector<std::vector<std::string>>& rings) {
  auto refuse = [](const std::string& why) {
    throw std::invalid_argument("train_reference_clusters: " + why);
  };
  if (!joins.empty() && !tables.empty()) refuse("joins with tables are not modelled");
  for (const auto& j : joins) {
    if (j.after_update < 1 || j.source < 0) {
      refuse("a join needs after_update >= 1 and a source cluster");
    }
    if (j.rejoins < 0) continue;
    const auto drop = dropped.find(j.rejoins);
    if (drop == dropped.end()) {
      refuse("cluster " + std::to_string(j.rejoins) + " rejoins but was not dropped");
    }
    // Dropped at round d: it trained update d + 1, then left; it can come back after it.
    const int64_t last = *std::max_element(drop->second.begin(), drop->second.end());
    if (j.after_update <= last) {
      refuse("cluster " + std::to_string(j.rejoins) + " rejoins after update " +
             std::to_string(j.after_update) + ", before its drop at round " +
             std::to_string(last));
    }
  }
  const size_t ring_count = std::max<size_t>(1, rings.size());
  for (const auto& [c, rounds] : dropped) {
    if (c < 0 || c >= clusters || rounds.empty() ||
        (rounds.size() != 1 && rounds.size() != ring_count) ||
        std::any_of(rounds.begin(), rounds.end(), [](int64_t r) { return r < 0; })) {
      refuse("a drop names a cluster of the plan and one round, or one a ring");
    }
  }
  if (!dropped.empty() && (job.train.reduce != config::ReduceMode::kParameters ||
                           job.train.reduce_factor != 1 || job.train.update_frequency != 1)) {
    refuse("a drop schedule needs reduce = \"parameters\" every update");
  }
  if (!tables.empty() && !job.sparse_optimizer) {
    throw std::runtime_error(job.origin + ": sparse_optimizer: the tables need one");
  }
}

ClusterReference::ClusterReference(const std::string& model_path, const config::JobSpec& job,
                                   int clusters, int64_t max_batches,
                                   const std::vector<ReferenceTable>& tables,
                                   const std::map<int, std::vector<int64_t>>& dropped,
                                   const std::vector<ReferenceJoin>& joins,
                                   const std::vector<std::vector<std::string>>& rings)
    : model_path_(model_path),
      job_(job),
      t_(job.train),
      max_batches_(max_batches),
      tables_(tables),
      joins_(joins),
      rings_(rings),
      train_(data::load_dataset(job.data, data::Split::kTrain)),
      loss_(job.loss),
      copies_(static_cast<size_t>(clusters)),
      looked_up_(tables.size()) {
  for (auto& copy : copies_) make_copy(copy);
  for (const auto& [c, rounds] : dropped) copies_[static_cast<size_t>(c)].drop_rounds = rounds;
  deal();
  for (size_t k = 0; k < tables_.size(); ++k) {
    table_optimizers_.push_back(
        std::make_unique<training::SparseRowOptimizer>(copies_[0].tables[k], *job_.sparse_optimizer));
  }
  order_data();
  plan_ = make_update_plan(reference_facts(job_, clusters, !tables_.empty()));
}

// Copy c of `count` clusters: the model as loaded, its optimizer, schedule and RNG stream.
void ClusterReference::make_copy(Copy& copy) {
  copy.module = torch_support::load_module(model_path_);
  copy.module.train();
  std::vector<at::Tensor> all;
  for (const auto& p : copy.module.named_parameters()) {
    const bool table = std::any_of(tables_.begin(), tables_.end(),
                                   [&](const ReferenceTable& t) { return t.weight == p.name; });
    if (table) {
      copy.tables.push_back(p.value);
    } else {
      all.push_back(p.value);
    }
  }
  if (copy.tables.size() != tables_.size()) {
    throw std::runtime_error(model_path_ + ": a sparse table is not a parameter of the model");
  }
  copy.parameters = unique_trainable(all);
  for (const auto& b : copy.module.buffers()) copy.buffers.push_back(b);
  if (job_.outer) {
    std::vector<std::pair<std::string, at::Tensor>> live;
    for (const auto& p : copy.parameters) live.emplace_back(std::to_string(live.size()), p);
    copy.outer = std::make_unique<OuterOptimizer>(*job_.outer, std::move(live));
  }
  copy.optimizer = make_optimizer(job_.optimizer, all);
  copy.schedule = std::make_unique<LrSchedule>(*copy.optimizer, job_.scheduler);
  copy.optimizer->zero_grad();
  at::manual_seed(static_cast<uint64_t>(t_.seed));
  copy.rng_state = generator_.get_state();
}

// Every copy's data: shard c of the copies' count, as the daemons deal it (job_setup.cpp).
void ClusterReference::deal() {
  const int count = static_cast<int>(copies_.size());
  for (int c = 0; c < count; ++c) {
    Copy& copy = copies_[static_cast<size_t>(c)];
    if (!job_.data.order.empty()) {
      // The daemons' rule: each epoch's order dealt into contiguous parts.
      copy.own_order.emplace(
          data::cluster_part(data::read_epoch_orders(job_.data.order.resolved, train_.size(),
                                                     t_.epochs),
                             count, c),
          t_.batch_size, t_.drop_last);
      copy.shard.resize(copy.own_order->dataset_size());
    } else if (count > 1) {
      copy.shard = data::shard_indices(train_.size(), count, c, t_.seed);
    } else {
      // One cluster reads the whole dataset in its own order, no shard (job_setup.cpp): a
      // plan of one that a join grows.
      copy.shard.resize(static_cast<size_t>(train_.size()));
      for (size_t i = 0; i < copy.shard.size(); ++i) copy.shard[i] = static_cast<int64_t>(i);
    }
  }
}

void ClusterReference::order_data() {
  order_.emplace(static_cast<int64_t>(copies_[0].shard.size()), t_.batch_size, t_.seed, t_.shuffle,
                 t_.drop_last);
  total_ = order_->batches_per_epoch() * t_.epochs;
  if (t_.max_steps) total_ = std::min(total_, *t_.max_steps);
  if (max_batches_ >= 0) total_ = std::min(total_, max_batches_);
}

// Batch by batch, each at its place in the current dealing (a join deals anew: the epoch and the
// batch within it follow from the batches done, as a resumed root's do).
ReferenceResult ClusterReference::run() {
  const double started = now_seconds();
  while (result_.batches < total_) {
    const int64_t per_epoch = order_->batches_per_epoch();
    const int64_t epoch = result_.batches / per_epoch;
    const size_t b = static_cast<size_t>(result_.batches % per_epoch);
    if (epoch != dealt_epoch_ || b == 0) {
      if (b == 0) ++result_.epochs_started;
      dealt_epoch_ = epoch;
      batches_ = order_->epoch(epoch);
      own_batches_.clear();
      for (const auto& copy : copies_) {
        if (copy.own_order) own_batches_.push_back(copy.own_order->epoch(epoch));
      }
    }
    train_batch(b);
    ++pending_;
    const bool last = result_.batches == total_;
    // An epoch's end steps the schedule when the next epoch's first batch is done, before its
    // update, as the daemons do (StageWorker::batch_finished): after a join's new dealing, for
    // every epoch end its jump passes.
    for (auto& copy : copies_) {
      while (copy.live && copy.epochs_ended < epoch) {
        copy.schedule->on_epoch_end();
        ++copy.epochs_ended;
      }
    }
    if (pending_ == t_.update_frequency || last) {
      run_steps(plan_.update, last);
      if (!last) run_steps(plan_.boundary, last);
    }
    // A cluster that joins after this update: a copy of its source's state (weights,
    // optimizer, LR step, random state, outer state), and the data dealt one more way.
    for (const auto& j : joins_) {
      if (pending_ == 0 && j.after_update == result_.updates) join(j);
    }
  }
  run_steps(plan_.end, true);
  result_.train_seconds = now_seconds() - started;
  result_.samples_per_second =
      result_.train_seconds > 0 ? result_.samples / result_.train_seconds : 0;
  const auto first_live =
      std::find_if(copies_.begin(), copies_.end(), [](const Copy& copy) { return copy.live; });
  if (first_live == copies_.end()) {
    throw std::invalid_argument("train_reference_clusters: every cluster was dropped");
  }
  result_.state = state_of(first_live->module);
  return std::move(result_);
}

// Forward and backward of batch b of the dealing on every live copy, each on its own data and
// RNG stream.
void ClusterReference::train_batch(size_t b) {
  double batch_loss = 0;
  size_t live = 0;
  for (const auto& copy : copies_) live += copy.live ? 1 : 0;
  for (size_t c = 0; c < copies_.size(); ++c) {
    auto& copy = copies_[c];
    if (!copy.live) continue;
    generator_.set_state(copy.rng_state);
    std::vector<int64_t> indices = batches_[b];
    if (copy.own_order) {
      indices = own_batches_[c][b];  // dataset indices already
    } else {
      for (auto& index : indices) index = copy.shard[index];
    }
    const data::Batch batch = train_.get(indices);
    const int64_t n = batch.size();
    for (const auto& [begin, end] : data::split_micro_batches(n, t_.micro_batches)) {
      const data::Batch micro = batch.slice(begin, end);
      std::vector<c10::IValue> inputs(micro.inputs.begin(), micro.inputs.end());
      for (size_t k = 0; k < tables_.size(); ++k) {
        looked_up_[k].push_back(micro.inputs.at(static_cast<size_t>(tables_[k].index_input))
                                    .flatten()
                                    .to(at::kLong));
      }
      const at::Tensor weighted = loss_(copy.module.forward(inputs), micro.labels) *
                                  micro_batch_loss_weight(end - begin, n, t_.update_frequency);
      weighted.backward();
      batch_loss += weighted.item<double>();
    }
    result_.samples += n;
    copy.rng_state = generator_.get_state();
  }
  result_.batch_losses.push_back(batch_loss * t_.update_frequency / static_cast<double>(live));
  ++result_.batches;
}

void ClusterReference::run_steps(const std::vector<UpdateStep>& steps, bool last) {
  torch::NoGradGuard no_grad;
  for (const auto& step : steps) run_step(step, last);
}

// Each step of the workers' plan, done on every live copy as that copy's nodes do it.
void ClusterReference::run_step(const UpdateStep& step, bool last) {
  switch (step.kind) {
    case StepKind::kReduceGradients:
      average_rings([&](Copy& copy) { return state_tensors(copy, false, true); });
      break;
    case StepKind::kUnscaleAndClip:
      for_live([&](Copy& copy) { clip_as_job_says(t_, *copy.optimizer); });
      break;
    case StepKind::kOptimizerStep: for_live([](Copy& copy) { copy.optimizer->step(); }); break;
    case StepKind::kPushRows: step_tables(); break;
    case StepKind::kZeroGrad: for_live([](Copy& copy) { copy.optimizer->zero_grad(); }); break;
    case StepKind::kLrOnUpdate: for_live([](Copy& copy) { copy.schedule->on_update(); }); break;
    case StepKind::kCountUpdate: count_update(); break;
    case StepKind::kOuterStep: outer_step(last); break;
    case StepKind::kAverageParameters:
      if (due_every(step.every, static_cast<uint64_t>(result_.updates))) {
        average_rings([&](Copy& copy) { return state_tensors(copy, t_.average_optim, false); });
      }
      break;
    case StepKind::kAverageFinal:
      average_rings([&](Copy& copy) { return state_tensors(copy, false, false); });
      break;
    // Not in a reference's plan (reference_facts), or nothing to do in one process: no
    // servers, no stage sharing tensors with another, no loss scale, no files.
    case StepKind::kServerExchange: case StepKind::kSumSharedGradients:
    case StepKind::kScalerUpdate: case StepKind::kSaveStage: case StepKind::kMarkBoundary:
    case StepKind::kWriteCheckpoint: case StepKind::kSaveTrained: break;
  }
}

void ClusterReference::for_live(const std::function<void(Copy&)>& each) {
  for (auto& copy : copies_) {
    if (copy.live) each(copy);
  }
}

void ClusterReference::count_update() {
  ++result_.updates;
  pending_ = 0;
  // A cluster whose last ring drops it at this round (result.updates - 1) trains no more; a
  // ring that dropped it earlier already averages without it (averages_in).
  for (auto& copy : copies_) {
    if (copy.live && !copy.drop_rounds.empty() &&
        *std::max_element(copy.drop_rounds.begin(), copy.drop_rounds.end()) ==
            result_.updates - 1) {
      copy.live = false;
    }
  }
}

// The tables step apart, as the servers step them: on the rows any copy looked up in this
// update, with the copies' average gradient of those rows.
void ClusterReference::step_tables() {
  for (size_t k = 0; k < tables_.size(); ++k) {
    const at::Tensor ids = std::get<0>(at::_unique2(at::cat(looked_up_[k]), true));
    looked_up_[k].clear();
    std::vector<at::Tensor> grads;
    for (auto& copy : copies_) {
      at::Tensor& table = copy.tables[k];
      grads.push_back(table.grad().defined() ? table.grad().index_select(0, ids)
                                             : at::zeros_like(table.index_select(0, ids)));
    }
    at::Tensor sum = grads[0].clone();
    for (size_t c = 1; c < grads.size(); ++c) sum.add_(grads[c]);
    table_optimizers_[k]->step(ids, sum.div_(static_cast<double>(grads.size())));
    for (auto& copy : copies_) {
      if (copy.tables[k].grad().defined()) copy.tables[k].mutable_grad() = at::Tensor();
      if (&copy != &copies_[0]) copy.tables[k].copy_(copies_[0].tables[k]);
    }
  }
}

// DiLoCo: each live copy's theta_global - theta_local, averaged; buffers averaged too.
void ClusterReference::outer_step(bool last) {
  if (!copies_[0].outer->due(static_cast<uint64_t>(result_.updates), last)) return;
  std::vector<std::vector<at::Tensor>> deltas = gather([](Copy& copy) { return copy.outer->deltas(); });
  average_across(deltas);
  average_across(gather([](Copy& copy) { return copy.buffers; }));
  size_t k = 0;
  for_live([&](Copy& copy) { copy.outer->step(deltas[k++]); });
}

void ClusterReference::join(const ReferenceJoin& j) {
  if (static_cast<size_t>(j.source) >= copies_.size() ||
      !copies_[static_cast<size_t>(j.source)].live) {
    throw std::invalid_argument("train_reference_clusters: cluster " + std::to_string(j.source) +
                                " does not train after update " + std::to_string(j.after_update) +
                                ": nothing to join from");
  }
  if (j.rejoins >= 0) {
    // The dropped cluster's slot anew, with the source's state; its shard as dealt before.
    Copy& back = copies_[static_cast<size_t>(j.rejoins)];
    std::vector<int64_t> shard = std::move(back.shard);
    std::optional<data::BatchOrder> own_order = std::move(back.own_order);
    back = Copy{};
    make_copy(back);
    back.shard = std::move(shard);
    back.own_order = std::move(own_order);
    take_state(back, copies_[static_cast<size_t>(j.source)]);
    return;
  }
  // A cluster dropped by now keeps its place in the new dealing (the grown plan keeps its nodes
  // and counts it, cluster_join.cpp): its shard is read by nobody until it rejoins.
  copies_.emplace_back();
  Copy& joined = copies_.back();
  make_copy(joined);
  take_state(joined, copies_[static_cast<size_t>(j.source)]);
  deal();
  order_data();
  dealt_epoch_ = -1;
  // The grown plan's update, as the daemons resume it.
  plan_ = make_update_plan(reference_facts(job_, static_cast<int>(copies_.size()), !tables_.empty()));
}

// What a joining or rejoining cluster takes from the checkpoint it copies: weights, buffers,
// optimizer state, LR step, epochs ended, random state and outer state.
void ClusterReference::take_state(Copy& into, const Copy& from) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < into.parameters.size(); ++k) into.parameters[k].copy_(from.parameters[k]);
  for (size_t k = 0; k < into.buffers.size(); ++k) into.buffers[k].copy_(from.buffers[k]);
  restore_optimizer(*into.optimizer, save_optimizer(*from.optimizer));
  into.schedule->restore(from.schedule->steps());
  into.epochs_ended = from.epochs_ended;
  into.rng_state = from.rng_state.clone();
  if (from.outer) into.outer->restore(from.outer->state());
}

// Whether `copy` takes part in ring `ring`'s average of this round (result.updates - 1): it
// trains, and that ring has not dropped it yet.
bool ClusterReference::averages_in(const Copy& copy, size_t ring) const {
  if (!copy.live) return false;
  if (copy.drop_rounds.empty()) return true;
  const int64_t dropped_at = copy.drop_rounds.size() == 1 ? copy.drop_rounds[0] : copy.drop_rounds[ring];
  return result_.updates - 1 < dropped_at;
}

std::vector<std::vector<at::Tensor>> ClusterReference::gather(
    const std::function<std::vector<at::Tensor>(Copy&)>& pick) {
  std::vector<std::vector<at::Tensor>> per_copy;
  for_live([&](Copy& copy) { per_copy.push_back(pick(copy)); });
  return per_copy;
}

// The clusters' average as the daemons add it: a ring from each chunk's member on, parameter
// servers ([ps]) the workers in order, as average_across does.
void ClusterReference::average(const std::vector<std::vector<at::Tensor>>& per_copy) {
  if (job_.ps.present) return average_across(per_copy);
  ring_average(per_copy);
}

// The tensors of `pick` (parameters, their optimizer state, buffers or gradients, in the
// model's state order, each tagged with its state name) averaged ring by ring as `rings` lays
// them out, or all in one ring.
void ClusterReference::average_rings(const std::function<Named(Copy&)>& pick) {
  const size_t ring_count = std::max<size_t>(1, rings_.size());
  for (size_t k = 0; k < ring_count; ++k) {
    // The members of ring k this round, in cluster order (a ring's positions; a drop keeps the
    // others' order).
    std::vector<Named> named;
    for (auto& copy : copies_) {
      if (averages_in(copy, k)) named.push_back(pick(copy));
    }
    if (named.empty()) continue;
    std::vector<std::vector<at::Tensor>> per_copy(named.size());
    if (rings_.empty()) {
      for (size_t c = 0; c < named.size(); ++c) {
        for (const auto& [name, tensor] : named[c]) per_copy[c].push_back(tensor);
      }
    } else {
      // In the ring's order: its names, each name's tensors as `pick` listed them.
      for (const auto& name : rings_[k]) {
        for (size_t c = 0; c < named.size(); ++c) {
          for (const auto& [n, tensor] : named[c]) {
            if (n == name) per_copy[c].push_back(tensor);
          }
        }
      }
    }
    if (!per_copy[0].empty()) average(per_copy);
  }
}

// As a ring of one-node clusters lists them (ring_work.h): the model's state order (each
// module's parameters, then its buffers, then its children's), a parameter's optimizer state
// after it. The parameters averaged are the trainable ones, once each (not a hybrid's tables).
Named ClusterReference::state_tensors(Copy& copy, bool with_optimizer, bool gradients) {
  Named out;
  std::set<const void*> seen;
  for (const auto& m : copy.module.named_modules()) {
    const std::string prefix = m.name.empty() ? "" : m.name + ".";
    for (const auto& p : m.value.named_parameters(/*recurse=*/false)) {
      const bool trainable =
          std::any_of(copy.parameters.begin(), copy.parameters.end(),
                      [&](const at::Tensor& t) { return t.is_same(p.value); });
      if (!trainable || !seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
      const std::string name = prefix + p.name;
      if (gradients) {
        at::Tensor parameter = p.value;
        if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
        out.emplace_back(name, parameter.grad());
        continue;
      }
      out.emplace_back(name, p.value);
      if (with_optimizer) {
        for (auto& s : optimizer_state_tensors(*copy.optimizer, p.value)) out.emplace_back(name, s);
      }
    }
    if (gradients) continue;
    for (const auto& b : m.value.named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.name, b.value);
    }
  }
  return out;
}

}  // namespace

ReferenceResult train_reference_clusters(const std::string& model_path, const config::JobSpec& job,
                                         int clusters, int64_t max_batches,
                                         const std::vector<ReferenceTable>& tables,
                                         const std::map<int, std::vector<int64_t>>& dropped,
                                         const std::vector<ReferenceJoin>& joins,
                                         const std::vector<std::vector<std::string>>& rings) {
  check_reference_arguments(job, clusters, tables, dropped, joins, rings);
  return ClusterReference(model_path, job, clusters, max_batches, tables, dropped, joins, rings).run();
}

}  // namespace ravnest::training
