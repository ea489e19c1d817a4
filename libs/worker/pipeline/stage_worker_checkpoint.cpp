// StageWorker's checkpoints (stage_worker.h, docs/faults.md): what it keeps at every update
// boundary, writes every save_every updates or when stopped, and resumes from.
#include "libs/store/checkpoint_store.h"
#include "libs/worker/pipeline/leaf_metrics.h"
#include "libs/worker/pipeline/stage_worker.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/random_state.h"

namespace ravnest::worker {

void StageWorker::resume_from(const training::StageCheckpoint& c) {
  training::restore_stage_state(*setup_.stage, c.state);
  if (!c.optimizer.empty()) training::restore_optimizer(*setup_.optimizer, c.optimizer);
  if (setup_.lr_schedule) setup_.lr_schedule->restore(c.lr_steps);
  training::set_random_state(setup_.device, c.random_state);
  if (c.next_random_state.defined()) {
    random_.set_waiting(c.batches, 0, c.next_random_state);
  }
  current_epoch_ = c.epoch;
  batches_done_ = c.batches;
  // Training micro-batches are tagged with their batch's step: the next one is step `batches`.
  next_forward_train_ = Key{false, c.batches, 0};
  next_backward_ = Key{false, c.batches, 0};
  updates_done_ = c.updates;
  if (outer_) {
    // A checkpoint written before [outer] state was kept: the outer round starts afresh here.
    outer_->optimizer().reset_to_live();
    outer_->optimizer().restore(c.outer);
  }
  rings_.reduce_round = c.reduce_round;
  rings_.shared_round = c.shared_round;
  if (c.has_loss_scale && gradients_.scaler()) {
    gradients_.scaler()->restore(c.loss_scale, c.loss_scale_growth_tracker);
  }
  mark_boundary();
  saved_updates_ = c.updates;
  set_status([&](WorkerStatus& s) {
    s.epoch = current_epoch_;
    s.batches = batches_done_;
    s.updates = updates_done_;
  });
}

// What the next update changes before a checkpoint could be written (buffers change in every
// training forward; parameters and the optimizer only at the next step).
void StageWorker::mark_boundary() {
  training::StageCheckpoint& b = boundary_;
  b.identity = setup_.identity;
  b.cluster = setup_.node.cluster;
  b.position = setup_.node.position;
  b.updates = updates_done_;
  b.data = setup_.data;
  b.batches = batches_done_;
  b.epoch = current_epoch_;
  b.lr_steps = setup_.lr_schedule ? setup_.lr_schedule->steps() : 0;
  b.reduce_round = rings_.reduce_round;
  b.shared_round = rings_.shared_round;
  b.has_loss_scale = gradients_.scaler() != nullptr;
  if (b.has_loss_scale) {
    b.loss_scale = gradients_.scaler()->scale();
    b.loss_scale_growth_tracker = gradients_.scaler()->growth_tracker();
  }
  b.random_state = training::random_state(setup_.device);
  b.next_random_state = random_.waiting(batches_done_, 0);
  b.state.clear();
  for (const auto& buffer : setup_.stage->named_buffers()) {
    b.state.emplace_back(buffer.name, buffer.value.detach().clone());
  }
  boundary_losses_ = metrics_ ? metrics_->losses().size() : 0;
  // The round that follows this update comes after: a resumed root runs it again.
  boundary_validation_ = metrics_ ? metrics_->validation().size() : 0;
  boundary_valid_ = true;
}

void StageWorker::write_checkpoint() {
  if (!setup_.checkpoints || !boundary_valid_ || boundary_.updates <= saved_updates_) return;
  training::StageCheckpoint c = boundary_;
  c.state.clear();
  for (const auto& p : setup_.stage->named_parameters()) {
    c.state.emplace_back(p.name, p.value.detach());
  }
  c.state.insert(c.state.end(), boundary_.state.begin(), boundary_.state.end());
  if (metrics_) {
    c.losses = metrics_->losses().substr(0, boundary_losses_);
    c.validation = metrics_->validation().substr(0, boundary_validation_);
    c.has_validation = true;
  }
  c.optimizer = training::save_optimizer(*setup_.optimizer);
  if (outer_) c.outer = outer_->optimizer().state();
  setup_.checkpoints->write(c);
  saved_updates_ = c.updates;
  port_.checkpoint_written(c.identity, c.updates);
}

void StageWorker::checkpoint_on_stop() {
  if (metrics_) metrics_->flush();
  write_checkpoint();
}

}  // namespace ravnest::worker
