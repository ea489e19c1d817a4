// StageCheckpoint: one node's training state at an update boundary of a synchronous job, enough
// to continue the job exactly where it was: the stage's parameters and buffers, the optimizer's
// state, the LR schedule's step, the data cursor (batches done; the epoch and the batch within it
// follow, since every epoch's order is a function of the seed), the random generator's state and,
// for the first node of a random chain, the state the next micro-batch's stream starts from, the
// leaf's losses so far, and the job's identity and the plan's slot (cluster, position) so that a
// checkpoint is never resumed by another job or stage. The slot, not the node, owns it: a spare
// node that replaces a dead one (`ravnest replace`) resumes from the dead node's checkpoint.
//
// A file is written to a temporary name and renamed: it is complete or absent. Reading refuses
// a file that is not a checkpoint, naming the path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "libs/stage/stage.h"

namespace ravnest::training {

struct StageCheckpoint {
  std::string identity;  // the job's: its text and the plan's stages (Requester)
  int cluster = -1;           // the plan's slot that wrote it
  int position = -1;
  uint64_t updates = 0;       // optimizer updates done
  uint64_t batches = 0;       // training batches done: the data cursor
  uint32_t epoch = 0;         // the epoch of the last batch done
  int64_t lr_steps = 0;       // LrSchedule::steps()
  uint64_t reduce_round = 0;  // rounds of the node's rings so far
  uint64_t shared_round = 0;
  at::Tensor random_state;       // the process's CPU generator
  at::Tensor next_random_state;  // first node of a random chain; undefined otherwise
  std::string losses;            // leaf: losses.txt so far
  // Leaf: validation.txt so far, the rounds before this update's (a resumed root runs that one
  // again). Absent from files written before it was kept: `has_validation` false.
  std::string validation;
  bool has_validation = false;
  // The data it trained on, as shipped: "field<TAB>location" lines ("data.train\t<bundle>/d.csv"),
  // the bundle naming the files' SHA-256; a resume on other data is refused. Absent from files
  // written before it was kept: empty.
  std::string data;
  // fp16's loss scaler (GradScaler::scale, growth_tracker) after the update, so that a resumed
  // job skips and grows where the uninterrupted one does. Absent (`has_loss_scale` false) without
  // fp16 and from files written before it was kept: the scaler then starts afresh.
  bool has_loss_scale = false;
  double loss_scale = 0;
  int64_t loss_scale_growth_tracker = 0;
  std::vector<std::pair<std::string, at::Tensor>> state;  // parameters, then buffers, by name
  std::string optimizer;  // torch::optim::Optimizer::save, serialized
  // [outer]: theta_global and the outer momentum (OuterOptimizer::state). Empty without [outer]
  // and in files written before it was kept.
  std::vector<std::pair<std::string, at::Tensor>> outer;
};

// The stage's parameters and buffers, copied (the stage goes on training).
std::vector<std::pair<std::string, at::Tensor>> copy_stage_state(const stage::Stage& stage);
// Copies `state` into the stage's own tensors (the optimizer keeps referring to them). Throws
// std::runtime_error when a name is missing or a shape differs.
void restore_stage_state(stage::Stage& stage,
                         const std::vector<std::pair<std::string, at::Tensor>>& state);

// The optimizer's state as bytes that hold host tensors (its state follows the parameters, on
// their device); restored onto the device of the optimizer's parameters.
std::string save_optimizer(const torch::optim::Optimizer& optimizer);
void restore_optimizer(torch::optim::Optimizer& optimizer, const std::string& bytes);

// Writes host copies of tensors on a device: the file reads back on any machine.
void save_checkpoint(const StageCheckpoint& checkpoint, const std::string& path);
StageCheckpoint load_checkpoint(const std::string& path);
// Whether the file's bytes still hash to the checksum it was written with (one written before
// checkpoints carried a checksum: whether it reads), without loading its tensors.
bool checkpoint_intact(const std::string& path);
// Whether a resume may load the file as the checkpoint of job `identity` after `updates` updates
// of slot (`cluster`, `position`): it loads (its checksum matches) and says it is that (a
// checkpoint copied from another node or job, an older one renamed, is not). `cluster` < 0:
// of any slot. Loads it whole; never throws.
bool checkpoint_usable(const std::string& path, const std::string& identity, uint64_t updates,
                       int cluster, int position);

}  // namespace ravnest::training
