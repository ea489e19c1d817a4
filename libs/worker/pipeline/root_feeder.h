// RootFeeder: the root's reading of the data. It owns the batch order (BatchOrder over this
// cluster's shard), reads each batch, splits it into micro-batches and lets them enter the
// pipeline when the RootSchedule allows: all at once (GPipe), as gradients come back (1F1B), or
// (async) up to max_in_flight at once across batch boundaries, reading the next batch as soon as
// the current one is all in, except after a batch that validation follows (hold, release_hold).
// It also runs validation rounds: the whole validation set, in order, every micro-batch entering
// at once. It counts the micro-batches that came back and the samples trained, for progress.
//
// A stop that every node agrees on (hold(), docs/faults.md#stopping) caps the batches it lets
// in at an update boundary: the cluster's nodes then all finish that update and no later one.
// hold() is the one call made from another thread (the RPC thread); it and the reading of each
// batch's step take hold_mutex_, so a boundary it names is never already passed.
//
// It computes nothing itself: a micro-batch enters through FeedTarget::enter, which the root's
// StageWorker implements (its own forward, and the labels' way to the leaf).
//
// Not thread-safe but for hold(); lives on the worker's compute thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/worker/transfer.h"
#include "libs/worker/worker_setup.h"
#include "libs/config/job/job_spec.h"
#include "libs/data/batch_order.h"
#include "libs/training/schedule.h"

namespace ravnest::data {
class Dataset;
}

namespace ravnest::worker {

// What the feeder drives.
class FeedTarget {
 public:
  virtual ~FeedTarget() = default;
  // The worker failed: nothing more enters.
  virtual bool feeding_stopped() const = 0;
  // One micro-batch enters: `inputs` are the model's inputs and `labels` the labels, each already
  // cut to the micro-batch's samples (tag.samples of them).
  virtual void enter(const MicroBatchTag& tag, const std::vector<at::Tensor>& inputs,
                     const at::Tensor& labels) = 0;
  // Runs what became ready: a validation micro-batch goes through before the next enters.
  virtual void run_ready() = 0;
};

class RootFeeder {
 public:
  // The root's options (the job's [data] and [train]), made by make_worker_setup.
  struct Options {
    std::shared_ptr<data::Dataset> train_data;
    std::vector<int64_t> shard;  // this cluster's samples; empty: all
    // [data] order: each epoch's samples (dataset indices, this cluster's part), in place of
    // the seeded permutation of the shard; empty: that permutation.
    std::vector<std::vector<int64_t>> epoch_orders;
    std::shared_ptr<data::Dataset> validation_data;  // none: no validation rounds
    int epochs = 1;
    int64_t batch_size = 1;
    int micro_batches = 1;
    bool shuffle = true;
    bool drop_last = false;
    int64_t max_batches = -1;  // -1: no cap
    int val_freq = 0;  // validation every val_freq updates; 0: after every epoch
    config::LossSpec loss;  // the job's [loss]: which labels count (MicroBatchTag::batch_counted)
  };

  // `setup` (the root's), `options` and `target` must outlive the feeder.
  RootFeeder(const WorkerSetup& setup, const Options& options, FeedTarget& target);

  // Makes the batch order; returns the batches training will run (at least one, or throws
  // std::runtime_error).
  uint64_t start();
  // A resumed job: the first `batches_done` batches of training are behind (after start()).
  void skip(uint64_t batches_done);
  enum class Begin { kStarted, kHeld, kDone };
  // Reads the next batch and lets in what the schedule allows: kDone when training has no batch
  // left, kHeld when hold() stops it before the next one (pump() goes on once the hold moves).
  Begin begin_batch();
  // Lets no training batch in beyond `target` updates (0: the end of the update whose batches
  // are already in; a target below that, or below an earlier hold, counts as that). Returns the
  // boundary now held, at most the job's last update; `*moved` says whether it moved further.
  // Any thread.
  uint64_t hold(uint64_t target, bool* moved);
  // A micro-batch's backward is done at the root.
  void micro_batch_done(uint32_t samples);
  // Lets in the next micro-batches that the schedule now allows: of the current batch, or async,
  // of the batches after it.
  void pump();
  bool asynchronous() const { return schedule_.asynchronous(); }
  // Async: the batch whose end validation follows is all in, and nothing more enters until
  // release_hold() (after the round).
  void release_hold() { holding_ = false; }
  // Whether the training batch `step` was its epoch's last.
  bool epoch_ends_with(uint64_t step) const;
  void run_validation_round();

  uint64_t samples_done() const { return samples_done_; }
  double samples_per_second() const;

 private:
  int64_t train_size() const;
  // The next batch, none injected yet; kDone when training has none left, kHeld at the hold.
  Begin load_batch();
  uint64_t batches_per_update() const;
  void pump_async();
  void inject(uint32_t index);
  void inject_micro(MicroBatchTag tag, const std::vector<at::Tensor>& inputs,
                    const at::Tensor& labels, int64_t begin, int64_t end);

  const WorkerSetup& setup_;
  const Options& options_;
  FeedTarget& target_;
  training::RootSchedule schedule_;
  std::optional<data::BatchOrder> train_order_;
  std::vector<std::vector<int64_t>> epoch_batches_;
  size_t batch_in_epoch_ = 0;
  uint64_t next_step_ = 0;
  uint64_t next_validation_step_ = 0;
  uint64_t total_batches_ = 0;
  std::vector<std::pair<int64_t, int64_t>> micro_ranges_;
  std::vector<at::Tensor> batch_inputs_;
  at::Tensor batch_labels_;
  uint32_t injected_ = 0;   // of the current batch
  uint32_t completed_ = 0;  // of the current batch (sync: the only one in flight)
  uint64_t in_flight_ = 0;  // injected and not back, over every batch (async)
  bool holding_ = false;
  std::mutex hold_mutex_;              // next_step_ and hold_updates_
  std::optional<uint64_t> hold_updates_;  // hold(): no batch beyond this many updates
  MicroBatchTag current_batch_;
  double started_at_ = 0;
  uint64_t samples_done_ = 0;
};

}  // namespace ravnest::worker
