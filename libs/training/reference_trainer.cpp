// Long because: the single-process reference re-implements every training mode (pipeline,
// clusters with their rings, drops and joins, sparse tables, DiLoCo) in train_reference_clusters;
// issue 44 makes it one loop over the update plan the workers run.
#include "libs/stage/torchscript_stage.h"
#include "libs/torch_support/module_file.h"
#include "libs/training/reference_trainer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/training/sparse_optimizer.h"
#include "libs/training/outer_optimizer.h"
#include "libs/training/tensor_average.h"

#include "libs/base/clock.h"
#include "libs/data/batch_order.h"
#include "libs/data/epoch_orders.h"
#include "libs/data/dataset.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/checkpoint.h"
#include "libs/training/grad_clip.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ravnest::training {
using base::now_seconds;

namespace {

// The gradients an optimizer steps, in its order (the model's, as PyTorch's parameters()).
std::vector<at::Tensor> optimizer_gradients(torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) grads.push_back(p.grad());
  }
  return grads;
}

// [train] grad_clip_value, then grad_clip_norm, on the whole model (no autocast here: the
// reference trainer runs float32; autocast is compared with PyTorch itself).
void clip_as_job_says(const config::TrainSpec& t, const std::vector<at::Tensor>& grads) {
  if (t.grad_clip_value) clip_gradients_by_value(grads, *t.grad_clip_value);
  if (t.grad_clip_norm) clip_grad_norm(grads, *t.grad_clip_norm, t.grad_clip_norm_type);
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
  torch::jit::Module module = torch_support::load_module(model_path);
  return train_reference(module, job, max_batches);
}

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

  data::BatchOrder order =
      job.data.order.empty()
          ? data::BatchOrder(train.size(), t.batch_size, t.seed, t.shuffle, t.drop_last)
          : data::BatchOrder(data::read_epoch_orders(job.data.order.resolved, train.size(),
                                                     t.epochs),
                             t.batch_size, t.drop_last);
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
    stage::TorchScriptStage whole(module);  // the same module, not a copy
    point.result = evaluate(whole, *validation, loss, t.batch_size);
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
          throw std::runtime_error("training batch " + std::to_string(result.batches + 1) + ": " +
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
      result.batch_losses.push_back(batch_loss * t.update_frequency);
      result.samples += n;
      ++result.batches;
      ++pending;
      const bool last = result.batches == total;
      bool validated = false;
      if (pending == t.update_frequency || last) {
        result.update_lrs.push_back(schedule.lr());
        clip_as_job_says(t, optimizer_gradients(*optimizer));
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

namespace {

// The ring's average: the sum over copies, divided by their count; integer tensors (BatchNorm's
// num_batches_tracked) with floor division.
void average_across(const std::vector<std::vector<at::Tensor>>& per_copy) {
  if (per_copy.empty()) return;
  for (size_t t = 0; t < per_copy[0].size(); ++t) {
    std::vector<at::Tensor> copies;
    for (const auto& copy : per_copy) copies.push_back(copy[t]);
    const at::Tensor average = average_of(copies);
    for (const auto& copy : per_copy) copy[t].copy_(average);
  }
}

// What the daemons' ring all-reduce (libs/ring/ring_allreduce.h) computes, to the bit: the
// tensors grouped by dtype, each group flattened in order and cut into one chunk per copy (the
// first count % n chunks one element longer); chunk c summed in ring order from copy c on,
// ((x_c + x_c+1) + ...) + x_c-1, then divided by n (floating: one division per element;
// integers: floor division of the exact sum). The copies are the ring's members in position
// order. Floating addition is not associative: with three copies or more, summing every chunk
// from copy 0 (average_across) differs in the last bit, which long runs of some models
// (BatchNorm, max-pooling, dropout) grow to 1e-3.
void ring_average(const std::vector<std::vector<at::Tensor>>& per_copy) {
  const size_t n = per_copy.size();
  if (n < 3) return average_across(per_copy);  // a + b is b + a: the order cannot matter
  std::vector<at::ScalarType> dtypes;
  for (const auto& t : per_copy[0]) {
    if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) {
      dtypes.push_back(t.scalar_type());
    }
  }
  for (const at::ScalarType dtype : dtypes) {
    std::vector<size_t> members;  // indices of this group's tensors
    for (size_t k = 0; k < per_copy[0].size(); ++k) {
      if (per_copy[0][k].scalar_type() == dtype) members.push_back(k);
    }
    if (dtype != at::kFloat && dtype != at::kDouble) {
      // Integer sums are exact in any order; other floating types are not modelled here.
      std::vector<std::vector<at::Tensor>> group(n);
      for (size_t c = 0; c < n; ++c) {
        for (size_t k : members) group[c].push_back(per_copy[c][k]);
      }
      average_across(group);
      continue;
    }
    std::vector<at::Tensor> flat(n);
    for (size_t c = 0; c < n; ++c) {
      std::vector<at::Tensor> parts;
      for (size_t k : members) parts.push_back(per_copy[c][k].reshape(-1));
      flat[c] = at::cat(parts).contiguous();
    }
    const int64_t count = flat[0].numel();
    at::Tensor result = at::empty_like(flat[0]);
    const int64_t base = count / static_cast<int64_t>(n), rem = count % static_cast<int64_t>(n);
    for (size_t c = 0; c < n; ++c) {
      const int64_t i = static_cast<int64_t>(c);
      const int64_t begin = i * base + std::min(i, rem), length = base + (i < rem ? 1 : 0);
      if (length == 0) continue;
      at::Tensor sum = flat[c].narrow(0, begin, length).clone();
      for (size_t j = 1; j < n; ++j) sum.add_(flat[(c + j) % n].narrow(0, begin, length));
      if (dtype == at::kFloat) {
        float* x = sum.data_ptr<float>();
        const float d = static_cast<float>(n);
        for (int64_t e = 0; e < length; ++e) x[e] /= d;
      } else {
        double* x = sum.data_ptr<double>();
        const double d = static_cast<double>(n);
        for (int64_t e = 0; e < length; ++e) x[e] /= d;
      }
      result.narrow(0, begin, length).copy_(sum);
    }
    int64_t offset = 0;
    for (size_t k : members) {
      const int64_t numel = per_copy[0][k].numel();
      const at::Tensor part = result.narrow(0, offset, numel).view(per_copy[0][k].sizes());
      for (size_t c = 0; c < n; ++c) per_copy[c][k].copy_(part);
      offset += numel;
    }
  }
}

}  // namespace

ReferenceResult train_reference_clusters(const std::string& model_path, const config::JobSpec& job,
                                         int clusters, int64_t max_batches,
                                         const std::vector<ReferenceTable>& tables,
                                         const std::map<int, int64_t>& dropped,
                                         const std::vector<ReferenceJoin>& joins,
                                         const std::vector<std::vector<std::string>>& rings) {
  if (!joins.empty() && (!dropped.empty() || !tables.empty())) {
    throw std::invalid_argument("train_reference_clusters: joins with drops or tables are not "
                                "modelled");
  }
  for (const auto& j : joins) {
    if (j.after_update < 1 || j.source < 0) {
      throw std::invalid_argument("train_reference_clusters: a join needs after_update >= 1 and "
                                  "a source cluster");
    }
  }
  if (dropped.count(0) || (!dropped.empty() && (job.train.reduce != config::ReduceMode::kParameters ||
                                                job.train.reduce_factor != 1 ||
                                                job.train.update_frequency != 1))) {
    throw std::invalid_argument("train_reference_clusters: a drop schedule needs reduce = "
                                "\"parameters\" every update, and keeps cluster 0");
  }
  if (!tables.empty() && !job.sparse_optimizer) {
    throw std::runtime_error(job.origin + ": sparse_optimizer: the tables need one");
  }
  const torch_support::EagerNumerics eager;  // as the daemons' stages compute
  const config::TrainSpec& t = job.train;
  const data::Dataset train = data::load_dataset(job.data, data::Split::kTrain);
  const Loss loss(job.loss);
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
    bool live = true;                // not dropped (`dropped`)
    int64_t epochs_ended = 0;        // the schedule's on_epoch_end calls: the last batch's epoch
    std::unique_ptr<OuterOptimizer> outer;  // [outer] only
  };
  std::vector<Copy> copies(static_cast<size_t>(clusters));
  std::vector<std::unique_ptr<training::SparseRowOptimizer>> table_optimizers;
  std::vector<std::vector<at::Tensor>> looked_up(tables.size());  // this update's indices
  auto generator = at::detail::getDefaultCPUGenerator();
  // Copy c of `count` clusters: the model as loaded, its optimizer, schedule and RNG stream.
  auto make_copy = [&](Copy& copy) {
    copy.module = torch_support::load_module(model_path);
    copy.module.train();
    std::vector<at::Tensor> all;
    for (const auto& p : copy.module.named_parameters()) {
      const bool table = std::any_of(tables.begin(), tables.end(),
                                     [&](const ReferenceTable& t) { return t.weight == p.name; });
      if (table) {
        copy.tables.push_back(p.value);
      } else {
        all.push_back(p.value);
      }
    }
    if (copy.tables.size() != tables.size()) {
      throw std::runtime_error(model_path + ": a sparse table is not a parameter of the model");
    }
    copy.parameters = unique_trainable(all);
    for (const auto& b : copy.module.buffers()) copy.buffers.push_back(b);
    if (job.outer) {
      std::vector<std::pair<std::string, at::Tensor>> live;
      for (const auto& p : copy.parameters) live.emplace_back(std::to_string(live.size()), p);
      copy.outer = std::make_unique<OuterOptimizer>(*job.outer, std::move(live));
    }
    copy.optimizer = make_optimizer(job.optimizer, all);
    copy.schedule = std::make_unique<LrSchedule>(*copy.optimizer, job.scheduler);
    copy.optimizer->zero_grad();
    at::manual_seed(static_cast<uint64_t>(t.seed));
    copy.rng_state = generator.get_state();
  };
  // Every copy's data: shard c of the copies' count, as the daemons deal it (job_setup.cpp).
  auto deal = [&]() {
    const int count = static_cast<int>(copies.size());
    for (int c = 0; c < count; ++c) {
      Copy& copy = copies[static_cast<size_t>(c)];
      if (!job.data.order.empty()) {
        // The daemons' rule: each epoch's order dealt into contiguous parts.
        copy.own_order.emplace(
            data::cluster_part(data::read_epoch_orders(job.data.order.resolved, train.size(),
                                                       t.epochs),
                               count, c),
            t.batch_size, t.drop_last);
        copy.shard.resize(copy.own_order->dataset_size());
      } else if (count > 1) {
        copy.shard = data::shard_indices(train.size(), count, c, t.seed);
      } else {
        // One cluster reads the whole dataset in its own order, no shard (job_setup.cpp): a
        // plan of one that a join grows.
        copy.shard.resize(static_cast<size_t>(train.size()));
        for (size_t i = 0; i < copy.shard.size(); ++i) copy.shard[i] = static_cast<int64_t>(i);
      }
    }
  };
  for (auto& copy : copies) make_copy(copy);
  deal();
  for (size_t k = 0; k < tables.size(); ++k) {
    table_optimizers.push_back(
        std::make_unique<training::SparseRowOptimizer>(copies[0].tables[k], *job.sparse_optimizer));
  }
  std::optional<data::BatchOrder> order;
  int64_t total = 0;
  auto order_data = [&]() {
    order.emplace(static_cast<int64_t>(copies[0].shard.size()), t.batch_size, t.seed, t.shuffle,
                  t.drop_last);
    total = order->batches_per_epoch() * t.epochs;
    if (t.max_steps) total = std::min(total, *t.max_steps);
    if (max_batches >= 0) total = std::min(total, max_batches);
  };
  order_data();

  ReferenceResult result;
  int64_t pending = 0;
  const double started = now_seconds();
  auto gather = [&](auto pick) {
    std::vector<std::vector<at::Tensor>> per_copy;
    for (auto& copy : copies) {
      if (copy.live) per_copy.push_back(pick(copy));
    }
    return per_copy;
  };
  // As a ring of one-node clusters lists them (ring_work.h): the model's state order (each
  // module's parameters, then its buffers, then its children's), a parameter's optimizer state
  // after it.
  // The clusters' average as the daemons add it: a ring from each chunk's member on, parameter
  // servers ([ps]) the workers in order, as average_across does.
  auto average = [&](const std::vector<std::vector<at::Tensor>>& per_copy) {
    if (job.ps.present) return average_across(per_copy);
    ring_average(per_copy);
  };
  // The tensors of `pick` (parameters, their optimizer state, buffers or gradients, in the
  // model's state order, each tagged with its state name) averaged ring by ring as `rings` lays
  // them out, or all in one ring.
  using Named = std::vector<std::pair<std::string, at::Tensor>>;
  auto average_rings = [&](const std::function<Named(Copy&)>& pick) {
    std::vector<Named> named;
    for (auto& copy : copies) {
      if (copy.live) named.push_back(pick(copy));
    }
    if (named.empty()) return;
    auto tensors_of = [&](const std::function<bool(const std::string&)>& in_ring) {
      std::vector<std::vector<at::Tensor>> per_copy;
      for (const auto& list : named) {
        std::vector<at::Tensor> kept;
        for (const auto& [name, tensor] : list) {
          if (in_ring(name)) kept.push_back(tensor);
        }
        per_copy.push_back(std::move(kept));
      }
      return per_copy;
    };
    if (rings.empty()) return average(tensors_of([](const std::string&) { return true; }));
    for (const auto& ring : rings) {
      // In the ring's order: its names, each name's tensors as `pick` listed them.
      std::vector<std::vector<at::Tensor>> per_copy(named.size());
      for (const auto& name : ring) {
        for (size_t c = 0; c < named.size(); ++c) {
          for (const auto& [n, tensor] : named[c]) {
            if (n == name) per_copy[c].push_back(tensor);
          }
        }
      }
      if (!per_copy[0].empty()) average(per_copy);
    }
  };
  auto state_tensors = [&](Copy& copy, bool with_optimizer, bool gradients) {
    // The parameters averaged are the trainable ones, once each (not a hybrid's tables).
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
  };
  // Batch by batch, each at its place in the current dealing (a join deals anew: the epoch and the
  // batch within it follow from the batches done, as a resumed root's do).
  int64_t dealt_epoch = -1;
  std::vector<std::vector<int64_t>> batches;
  std::vector<std::vector<std::vector<int64_t>>> own_batches;  // [data] order: per copy
  while (result.batches < total) {
    const int64_t per_epoch = order->batches_per_epoch();
    const int64_t epoch = result.batches / per_epoch;
    const size_t b = static_cast<size_t>(result.batches % per_epoch);
    if (epoch != dealt_epoch || b == 0) {
      if (b == 0) ++result.epochs_started;
      dealt_epoch = epoch;
      batches = order->epoch(epoch);
      own_batches.clear();
      for (const auto& copy : copies) {
        if (copy.own_order) own_batches.push_back(copy.own_order->epoch(epoch));
      }
    }
    {
      double batch_loss = 0;
      size_t live = 0;
      for (const auto& copy : copies) live += copy.live ? 1 : 0;
      for (size_t c = 0; c < copies.size(); ++c) {
        auto& copy = copies[c];
        if (!copy.live) continue;
        generator.set_state(copy.rng_state);
        std::vector<int64_t> indices = batches[b];
        if (copy.own_order) {
          indices = own_batches[c][b];  // dataset indices already
        } else {
          for (auto& index : indices) index = copy.shard[index];
        }
        const data::Batch batch = train.get(indices);
        const int64_t n = batch.size();
        for (const auto& [begin, end] : data::split_micro_batches(n, t.micro_batches)) {
          const data::Batch micro = batch.slice(begin, end);
          std::vector<c10::IValue> inputs(micro.inputs.begin(), micro.inputs.end());
          for (size_t k = 0; k < tables.size(); ++k) {
            looked_up[k].push_back(micro.inputs.at(static_cast<size_t>(tables[k].index_input))
                                       .flatten()
                                       .to(at::kLong));
          }
          const at::Tensor weighted = loss(copy.module.forward(inputs), micro.labels) *
                                      micro_batch_loss_weight(end - begin, n, t.update_frequency);
          weighted.backward();
          batch_loss += weighted.item<double>();
        }
        result.samples += n;
        copy.rng_state = generator.get_state();
      }
      result.batch_losses.push_back(batch_loss * t.update_frequency / static_cast<double>(live));
      ++result.batches;
      ++pending;
      const bool last = result.batches == total;
      // An epoch's end steps the schedule when the next epoch's first batch is done, before its
      // update, as the daemons do (StageWorker::batch_finished): after a join's new dealing, for
      // every epoch end its jump passes.
      for (auto& copy : copies) {
        while (copy.live && copy.epochs_ended < epoch) {
          copy.schedule->on_epoch_end();
          ++copy.epochs_ended;
        }
      }
      if (pending == t.update_frequency || last) {
        torch::NoGradGuard no_grad;
        if (t.reduce == config::ReduceMode::kGradients) {
          average_rings([&](Copy& copy) { return state_tensors(copy, false, true); });
        }
        for (auto& copy : copies) {
          if (!copy.live) continue;
          clip_as_job_says(t, optimizer_gradients(*copy.optimizer));
          copy.optimizer->step();
          copy.optimizer->zero_grad();
          copy.schedule->on_update();
        }
        for (size_t k = 0; k < tables.size(); ++k) {
          const at::Tensor ids = std::get<0>(at::_unique2(at::cat(looked_up[k]), true));
          looked_up[k].clear();
          std::vector<at::Tensor> grads;
          for (auto& copy : copies) {
            at::Tensor& table = copy.tables[k];
            grads.push_back(table.grad().defined() ? table.grad().index_select(0, ids)
                                                   : at::zeros_like(table.index_select(0, ids)));
          }
          at::Tensor sum = grads[0].clone();
          for (size_t c = 1; c < grads.size(); ++c) sum.add_(grads[c]);
          table_optimizers[k]->step(ids, sum.div_(static_cast<double>(grads.size())));
          for (auto& copy : copies) {
            if (copy.tables[k].grad().defined()) copy.tables[k].mutable_grad() = at::Tensor();
            if (&copy != &copies[0]) copy.tables[k].copy_(copies[0].tables[k]);
          }
        }
        ++result.updates;
        pending = 0;
        // A cluster dropped at this round (result.updates - 1) is no longer averaged.
        for (const auto& [c, rounds] : dropped) {
          if (rounds == result.updates - 1) copies.at(static_cast<size_t>(c)).live = false;
        }
        if (job.outer) {
          if (copies[0].outer->due(static_cast<uint64_t>(result.updates), last)) {
            // DiLoCo: each live copy's theta_global - theta_local, averaged; buffers averaged too.
            std::vector<std::vector<at::Tensor>> deltas = gather([](Copy& copy) { return copy.outer->deltas(); });
            average_across(deltas);
            average_across(gather([](Copy& copy) { return copy.buffers; }));
            size_t k = 0;
            for (auto& copy : copies) {
              if (copy.live) copy.outer->step(deltas[k++]);
            }
          }
        } else if (t.reduce == config::ReduceMode::kParameters && result.updates % t.reduce_factor == 0) {
          average_rings([&](Copy& copy) { return state_tensors(copy, t.average_optim, false); });
        }
      }
      // A cluster that joins after this update: a copy of its source's state (weights,
      // optimizer, LR step, random state, outer state), and the data dealt one more way.
      for (const auto& j : joins) {
        if (pending != 0 || j.after_update != result.updates) continue;
        if (static_cast<size_t>(j.source) >= copies.size()) {
          throw std::invalid_argument("train_reference_clusters: no cluster " +
                                      std::to_string(j.source) + " to join from");
        }
        copies.emplace_back();
        Copy& joined = copies.back();
        make_copy(joined);
        const Copy& source = copies[static_cast<size_t>(j.source)];
        torch::NoGradGuard no_grad;
        for (size_t k = 0; k < joined.parameters.size(); ++k) {
          joined.parameters[k].copy_(source.parameters[k]);
        }
        for (size_t k = 0; k < joined.buffers.size(); ++k) joined.buffers[k].copy_(source.buffers[k]);
        restore_optimizer(*joined.optimizer, save_optimizer(*source.optimizer));
        joined.schedule->restore(source.schedule->steps());
        joined.epochs_ended = source.epochs_ended;
        joined.rng_state = source.rng_state.clone();
        if (source.outer) joined.outer->restore(source.outer->state());
        deal();
        order_data();
        dealt_epoch = -1;
      }
    }
  }
  {
    torch::NoGradGuard no_grad;
    average_rings([&](Copy& copy) { return state_tensors(copy, false, false); });
  }
  result.train_seconds = now_seconds() - started;
  result.samples_per_second = result.train_seconds > 0 ? result.samples / result.train_seconds : 0;
  result.state = state_of(copies[0].module);
  return result;
}

}  // namespace ravnest::training
