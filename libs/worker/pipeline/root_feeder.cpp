#include "libs/worker/pipeline/root_feeder.h"

#include <algorithm>
#include <stdexcept>

#include "libs/base/clock.h"
#include "libs/data/dataset.h"
#include "libs/training/loss.h"

namespace ravnest::worker {

RootFeeder::RootFeeder(const WorkerSetup& setup, const Options& options, FeedTarget& target)
    : setup_(setup),
      options_(options),
      target_(target),
      schedule_(setup.schedule, setup.node.cluster_size, setup.max_in_flight),
      // A resumed job's first batch, already here: a hold before start() holds there.
      next_step_(setup.resume ? setup.resume->batches : 0) {}

int64_t RootFeeder::train_size() const {
  return options_.shard.empty() ? options_.train_data->size()
                                : static_cast<int64_t>(options_.shard.size());
}

uint64_t RootFeeder::start() {
  started_at_ = base::now_seconds();
  if (!options_.epoch_orders.empty()) {
    train_order_.emplace(options_.epoch_orders, options_.batch_size, options_.drop_last);
  } else {
    train_order_.emplace(train_size(), options_.batch_size, static_cast<int64_t>(setup_.seed),
                         options_.shuffle, options_.drop_last);
  }
  uint64_t total = static_cast<uint64_t>(train_order_->batches_per_epoch()) * options_.epochs;
  if (options_.max_batches >= 0) total = std::min<uint64_t>(total, options_.max_batches);
  if (total == 0) throw std::runtime_error("the training set yields no batch");
  std::lock_guard<std::mutex> lock(hold_mutex_);  // hold() reads it
  total_batches_ = total;
  return total;
}

double RootFeeder::samples_per_second() const {
  return samples_done_ / std::max(base::now_seconds() - started_at_, 1e-9);
}

void RootFeeder::skip(uint64_t batches_done) {
  const uint64_t per_epoch = static_cast<uint64_t>(train_order_->batches_per_epoch());
  {
    std::lock_guard<std::mutex> lock(hold_mutex_);
    next_step_ = batches_done;
  }
  samples_done_ = 0;
  if (batches_done == 0 || per_epoch == 0) return;
  // The epoch of the last batch done, and where in it: begin_batch goes on from there, and on to
  // the next epoch's order (a function of the seed) when that one is over.
  const uint32_t epoch = static_cast<uint32_t>((batches_done - 1) / per_epoch);
  epoch_batches_ = train_order_->epoch(epoch);
  batch_in_epoch_ = static_cast<size_t>(batches_done - static_cast<uint64_t>(epoch) * per_epoch);
  current_batch_.epoch = epoch;
}

RootFeeder::Begin RootFeeder::begin_batch() {
  const Begin begun = load_batch();
  if (begun == Begin::kStarted) pump();
  return begun;
}

uint64_t RootFeeder::batches_per_update() const {
  return setup_.update_frequency <= 1 ? 1 : static_cast<uint64_t>(setup_.update_frequency);
}

uint64_t RootFeeder::hold(uint64_t target, bool* moved) {
  std::lock_guard<std::mutex> lock(hold_mutex_);
  const uint64_t every = batches_per_update();
  // The batches already read end their update at the next multiple of `every`: that update is
  // the nearest boundary every node of the cluster can still reach.
  const uint64_t nearest = (next_step_ + every - 1) / every;
  uint64_t held = std::max({target, nearest, hold_updates_.value_or(0)});
  // total_batches_ is known once start() ran; before, nothing is read yet and `nearest` holds.
  if (total_batches_ > 0) {
    held = std::min(held, training::updates_after(total_batches_, setup_.update_frequency, true));
  }
  *moved = hold_updates_.has_value() && held > *hold_updates_;
  hold_updates_ = held;
  return held;
}

bool RootFeeder::epoch_ends_with(uint64_t step) const {
  const uint64_t per_epoch = static_cast<uint64_t>(train_order_->batches_per_epoch());
  return per_epoch > 0 && (step + 1) % per_epoch == 0;
}

RootFeeder::Begin RootFeeder::load_batch() {
  uint64_t step = 0;
  {
    std::lock_guard<std::mutex> lock(hold_mutex_);
    if (next_step_ >= total_batches_) return Begin::kDone;
    if (hold_updates_ && next_step_ >= *hold_updates_ * batches_per_update()) return Begin::kHeld;
    step = next_step_++;
  }
  if (epoch_batches_.empty() || batch_in_epoch_ >= epoch_batches_.size()) {
    const uint32_t epoch = epoch_batches_.empty() ? 0 : current_batch_.epoch + 1;
    epoch_batches_ = train_order_->epoch(epoch);
    batch_in_epoch_ = 0;
    current_batch_.epoch = epoch;
  }
  std::vector<int64_t> indices = epoch_batches_[batch_in_epoch_++];
  if (!options_.shard.empty()) {
    for (auto& index : indices) index = options_.shard[index];
  }
  auto batch = options_.train_data->get(indices);
  batch_inputs_ = std::move(batch.inputs);
  batch_labels_ = std::move(batch.labels);
  micro_ranges_ =
      data::split_micro_batches(static_cast<int64_t>(indices.size()), options_.micro_batches);
  current_batch_.job_id = setup_.job_id;
  current_batch_.validate = false;
  current_batch_.step = step;
  current_batch_.count = static_cast<uint32_t>(micro_ranges_.size());
  current_batch_.batch_samples = static_cast<uint32_t>(indices.size());
  // With ignored labels the micro-batches weigh the labels that count (loss.h).
  const int64_t counted = training::counted_labels(batch_labels_, options_.loss);
  current_batch_.batch_counted =
      training::weigh_by_labels(counted, batch_labels_.numel()) ? static_cast<uint64_t>(counted) : 0;
  current_batch_.last = step + 1 >= total_batches_;
  injected_ = 0;
  completed_ = 0;
  if (schedule_.asynchronous() && options_.validation_data) {
    holding_ = training::validation_follows(current_batch_.step, total_batches_,
                                  static_cast<uint64_t>(train_order_->batches_per_epoch()),
                                  setup_.update_frequency, options_.val_freq);
  }
  return Begin::kStarted;
}

void RootFeeder::micro_batch_done(uint32_t samples) {
  samples_done_ += samples;
  ++completed_;
  if (in_flight_ > 0) --in_flight_;
}

void RootFeeder::pump() {
  if (schedule_.asynchronous()) return pump_async();
  while (!target_.feeding_stopped() &&
         schedule_.may_inject(static_cast<int>(injected_), static_cast<int>(completed_),
                              static_cast<int>(micro_ranges_.size()))) {
    inject(injected_++);
  }
}

void RootFeeder::pump_async() {
  while (!target_.feeding_stopped() && schedule_.may_inject_async(in_flight_)) {
    if (injected_ < micro_ranges_.size()) {
      ++in_flight_;
      inject(injected_++);
      continue;
    }
    if (holding_ || load_batch() != Begin::kStarted) return;
  }
}

void RootFeeder::inject(uint32_t index) {
  MicroBatchTag tag = current_batch_;
  tag.index = index;
  const auto [begin, end] = micro_ranges_[index];
  inject_micro(tag, batch_inputs_, batch_labels_, begin, end);
}

// The labels travel with the micro-batch they belong to, so they are cut here as the inputs are.
void RootFeeder::inject_micro(MicroBatchTag tag, const std::vector<at::Tensor>& inputs,
                              const at::Tensor& labels, int64_t begin, int64_t end) {
  tag.samples = static_cast<uint32_t>(end - begin);
  std::vector<at::Tensor> slices;
  slices.reserve(inputs.size());
  for (const auto& input : inputs) slices.push_back(input.slice(0, begin, end));
  target_.enter(tag, slices, labels.slice(0, begin, end));
}

void RootFeeder::run_validation_round() {
  if (!options_.validation_data) return;
  const auto& data = *options_.validation_data;
  data::BatchOrder order(data.size(), options_.batch_size, static_cast<int64_t>(setup_.seed),
                         /*shuffle=*/false, /*drop_last=*/false);
  const auto batches = order.epoch(0);
  for (size_t b = 0; b < batches.size() && !target_.feeding_stopped(); ++b) {
    auto batch = data.get(batches[b]);
    auto ranges = data::split_micro_batches(static_cast<int64_t>(batches[b].size()),
                                            options_.micro_batches);
    MicroBatchTag tag;
    tag.job_id = setup_.job_id;
    tag.validate = true;
    tag.step = next_validation_step_++;
    tag.count = static_cast<uint32_t>(ranges.size());
    tag.batch_samples = static_cast<uint32_t>(batches[b].size());
    tag.epoch = current_batch_.epoch;
    tag.last = b + 1 == batches.size();
    for (uint32_t index = 0; index < ranges.size(); ++index) {
      tag.index = index;
      inject_micro(tag, batch.inputs, batch.labels, ranges[index].first, ranges[index].second);
      target_.run_ready();
    }
  }
}

}  // namespace ravnest::worker
