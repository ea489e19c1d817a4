// LeafMetrics: what the leaf makes of its losses. Each training batch's loss is the sum of its
// micro-batches' mean losses weighted by their share of the batch (the batch's mean loss); it is
// added to losses.txt and reported as a step event when the batch finishes. Validation
// micro-batches add up loss and correct answers over a whole round, which is reported as one
// validation event when the round's last micro-batch is in.
//
// losses.txt is only ever replaced, never written into (base::write_file_atomically: a
// symlink placed there is replaced, not followed): emptied when the job starts, then rewritten
// with every loss so far at most once a second and after the last batch. A write that fails
// (a full disk) fails the job with one line naming the file.
//
// Each validation round is also a line of validation.txt beside losses.txt ("updates epoch loss
// accuracy", accuracy "-" when the task has no classes), rewritten the same way after each
// round; `ravnest losses` fetches both.
//
// The loss itself, and its backward, are the worker's: this only keeps the numbers.
// Not thread-safe; lives on the worker's compute thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "libs/config/job/job_spec.h"
#include "libs/worker/transfer.h"

namespace ravnest::training {
class Loss;
}

namespace ravnest::worker {

class LeafMetrics {
 public:
  // The leaf's options (the job's [loss] and [data] validation), made by make_worker_setup. The
  // loss is the leaf worker's to compute with (StageWorker), the rest this class's.
  struct Options {
    std::shared_ptr<training::Loss> loss;
    std::string losses_path;  // losses.txt: one loss per batch
    bool has_validation = false;  // validation rounds follow: the leaf finishes after the last
  };

  // `port` must outlive this; `losses_path` is rewritten (atomically) at most once a second and
  // after the last batch, starting with `losses_so_far` (a resumed job's). validation.txt starts
  // with `validation_so_far` (a resumed job's checkpoint's; without it, a resumed job goes on
  // from the file the node has, as checkpoints written before they kept it need).
  LeafMetrics(std::string losses_path, WorkerPort& port, std::string losses_so_far = {},
              std::optional<std::string> validation_so_far = std::nullopt);

  // A training micro-batch's mean loss and its share of the batch (its samples', or with ignored
  // labels its counted labels' share, loss.h).
  void add_training(const MicroBatchTag& batch, double loss, double share);
  // A training batch is done: its loss goes to losses.txt and out as a step event, with `lr`,
  // the learning rate it trained with.
  void batch_finished(const MicroBatchTag& batch, uint64_t batches_done, double lr = std::nan(""));
  double batch_loss() const { return batch_loss_; }
  const std::string& losses() const { return losses_; }  // losses.txt as written
  void flush();  // writes losses.txt now (a stopped job's)

  // A validation micro-batch's mean loss over its `weight` (its samples, or the labels that count:
  // training::counted_labels) and what the model answered. True when it closed the round: the
  // validation event (at `updates_done` updates) went out, with an accuracy only where there
  // is one (training::count_correct; NaN for none, written "-" in validation.txt).
  bool add_validation(const MicroBatchTag& batch, double loss, int64_t weight,
                      const c10::IValue& output, const at::Tensor& labels,
                      const config::LossSpec& spec, uint64_t updates_done);

  const std::string& validation() const { return validation_; }  // validation.txt as written

 private:
  std::string losses_path_;
  std::string validation_path_;  // beside losses_path_; empty when it is
  std::string validation_;       // every validation round so far
  std::string losses_;          // every batch loss so far, as losses.txt holds them
  double losses_written_at_ = 0;  // base::now_seconds() of the last write
  WorkerPort& port_;
  double batch_loss_ = 0;
  double validation_loss_sum_ = 0;
  int64_t validation_weight_ = 0;   // samples, or labels that count
  int64_t validation_right_ = 0;    // answers right (count_correct)
  int64_t validation_asked_ = 0;
  bool validation_has_classes_ = true;
};

}  // namespace ravnest::worker
