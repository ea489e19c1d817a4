#include "libs/worker/pipeline/leaf_metrics.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"

#include "libs/training/evaluate.h"

namespace ravnest::worker {

LeafMetrics::LeafMetrics(std::string losses_path, WorkerPort& port, std::string losses_so_far,
                         std::optional<std::string> validation_so_far)
    : losses_path_(std::move(losses_path)), losses_(std::move(losses_so_far)), port_(port) {
  if (validation_so_far) validation_ = std::move(*validation_so_far);
  if (!losses_path_.empty()) {
    validation_path_ = (std::filesystem::path(losses_path_).parent_path() / "validation.txt").string();
    // A resumed job goes on with the rounds its checkpoint had (a spare that took the leaf's
    // place has no file), or, from a checkpoint written before they were kept, the file's.
    if (!validation_so_far && !losses_.empty() &&
        std::filesystem::is_regular_file(validation_path_)) {
      try {
        validation_ = base::read_file(validation_path_);
      } catch (const std::exception&) {
        validation_.clear();  // history only: a file that cannot be read starts over
      }
    }
    base::write_file_atomically(validation_path_, validation_);
  }
  flush();
}

void LeafMetrics::add_training(const MicroBatchTag& batch, double loss, double share) {
  if (batch.index == 0) batch_loss_ = 0;
  batch_loss_ += loss * share;
}

void LeafMetrics::batch_finished(const MicroBatchTag& batch, uint64_t batches_done, double lr) {
  // As `std::ostream << double` writes it (6 significant digits), one line per batch. The whole
  // file is rewritten: a reader never sees half a line, and a link placed at its name is
  // replaced, not followed.
  std::ostringstream line;
  line << batch_loss_ << '\n';
  losses_ += line.str();
  if (batch.last || base::now_seconds() - losses_written_at_ >= 1.0) flush();
  ProgressEventData event;
  event.kind = EventKind::kStep;
  event.epoch = batch.epoch;
  event.step = batch.step;
  event.loss = batch_loss_;
  event.samples = batches_done;
  event.lr = lr;
  port_.event(event);
}

void LeafMetrics::flush() {
  if (!losses_path_.empty()) base::write_file_atomically(losses_path_, losses_);
  losses_written_at_ = base::now_seconds();
}

bool LeafMetrics::add_validation(const MicroBatchTag& batch, double loss, int64_t weight,
                                 const c10::IValue& output, const at::Tensor& labels,
                                 const config::LossSpec& spec, uint64_t updates_done) {
  if (weight > 0) validation_loss_sum_ += loss * static_cast<double>(weight);
  validation_weight_ += weight;
  const training::Correct correct = training::count_correct(output, labels, spec);
  if (correct.asked < 0) validation_has_classes_ = false;
  validation_right_ += correct.right;
  validation_asked_ += std::max<int64_t>(correct.asked, 0);
  if (batch.index + 1 != batch.count || !batch.last) return false;

  ProgressEventData event;
  event.kind = EventKind::kValidation;
  event.epoch = batch.epoch;
  event.step = updates_done;
  event.loss = validation_weight_ ? validation_loss_sum_ / static_cast<double>(validation_weight_) : 0;
  event.accuracy = validation_has_classes_ && validation_asked_
                       ? static_cast<double>(validation_right_) / static_cast<double>(validation_asked_)
                       : std::nan("");
  port_.event(event);
  std::ostringstream line;
  line << updates_done << ' ' << batch.epoch << ' ' << event.loss << ' ';
  if (std::isnan(event.accuracy)) line << '-';  // no classes: no accuracy, never "nan"
  else line << event.accuracy;
  line << '\n';
  validation_ += line.str();
  if (!validation_path_.empty()) base::write_file_atomically(validation_path_, validation_);
  validation_loss_sum_ = 0;
  validation_weight_ = 0;
  validation_right_ = 0;
  validation_asked_ = 0;
  validation_has_classes_ = true;
  return true;
}

}  // namespace ravnest::worker
