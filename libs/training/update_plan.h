// The update plan: a job's training mode as the ordered steps of an optimizer update, made once
// per job from plain facts (make_update_plan) and run step by step by whoever trains: a stage's
// StageWorker (worker/pipeline/stage_worker.h) on its node, the single-process reference trainer
// (reference_trainer.h) on its copies of the model. A mode (pipeline, parameter servers, hybrid,
// data parallelism reducing gradients or averaging parameters every k, DiLoCo, fp16's scaler,
// clipping, checkpoints every n) is a different plan, not a branch inside the update; as
// DeepSpeed's TrainSchedule yields instructions that its engine runs.
//
// Three phases, each a list run in order:
//   update    after the last batch of an update (training::update_due), the last batch's too;
//   boundary  then, at the boundary of an update that is not the job's last batch (what a
//             checkpoint holds);
//   end       after the last batch of the job.
// describe() prints the plan as one line, the job's mode, which a worker logs at job start.
//
// Pure: plain data in, plain data out, no I/O; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"

namespace ravnest::training {

// What decides the steps. A worker fills it from its WorkerSetup (a node's view: its role, its
// stage's rings); the reference trainer from the job and its count of copies.
struct UpdateFacts {
  int clusters = 1;  // clusters training side by side (data parallelism above 1)
  config::ReduceMode reduce = config::ReduceMode::kParameters;
  int64_t reduce_factor = 1;       // reduce = "parameters": average every this many updates
  bool parameter_servers = false;  // a [ps] worker: the servers step its parameters
  bool embedding_rows = false;     // a hybrid trainer: its tables' rows step on the servers
  bool shared_tensors = false;     // the stage shares tensors with other stages of its cluster
  bool loss_scaler = false;        // autocast = "fp16": the loss is scaled, gradients unscaled
  bool clip = false;               // grad_clip_norm or grad_clip_value
  std::optional<int64_t> outer_every;  // [outer] (DiLoCo): the outer step every this many updates
  int64_t save_every = 0;              // checkpoints every this many updates (0: none)
};

enum class StepKind {
  // update
  kServerExchange,      // gradients to the parameter servers, stepped parameters back
  kSumSharedGradients,  // a tensor shared between stages: its gradients summed over its holders
  kReduceGradients,     // gradients averaged across clusters (reduce = "gradients")
  kUnscaleAndClip,      // fp16's unscale, clipping; may skip this update's step (inf or nan)
  kOptimizerStep,       // the optimizer's step, unless kUnscaleAndClip skipped it
  kScalerUpdate,        // fp16's scale grows or backs off after the step (taken or skipped)
  kPushRows,            // a hybrid's looked-up rows' gradients pushed (the tables step apart)
  kZeroGrad,
  kLrOnUpdate,          // the LR schedule's step per update
  kCountUpdate,         // one more update done
  kOuterStep,           // DiLoCo's outer step when due (every `every` updates and after the last)
  kAverageParameters,   // parameters (and buffers, optimizer state as the job says) averaged
                        // across clusters every `every` updates
  kSaveStage,           // the trained stage written every `every` updates
  // boundary
  kMarkBoundary,        // what a checkpoint of this boundary holds is kept
  kWriteCheckpoint,     // the checkpoint written every `every` updates
  // end
  kAverageFinal,        // parameters and buffers averaged across clusters once more
  kSaveTrained,         // the trained stage written
};

struct UpdateStep {
  StepKind kind;
  int64_t every = 0;  // kOuterStep, kAverageParameters, kSaveStage, kWriteCheckpoint; else 0
  bool operator==(const UpdateStep& o) const { return kind == o.kind && every == o.every; }
};

struct UpdatePlan {
  std::vector<UpdateStep> update;
  std::vector<UpdateStep> boundary;
  std::vector<UpdateStep> end;
};

UpdatePlan make_update_plan(const UpdateFacts& facts);

// "optimizer-step", "average-parameters/4": the step's name, with its `every` when it has one.
std::string step_name(const UpdateStep& step);
// "update: reduce-gradients, optimizer-step, zero-grad, lr-on-update, count-update |
//  boundary: mark-boundary | end: average-final, save-trained"
std::string describe(const UpdatePlan& plan);

// Whether a step of period `every` runs after `updates` updates (a multiple of it; never when
// `every` is 0 or less).
inline bool due_every(int64_t every, uint64_t updates) {
  return every > 0 && updates % static_cast<uint64_t>(every) == 0;
}

}  // namespace ravnest::training
