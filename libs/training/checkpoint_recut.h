// A cluster's checkpoints of one update boundary, re-cut to the stages of a cluster cut at other
// points (docs/faults.md#a-dropped-cluster-rejoins). The planner cuts each cluster by its own
// nodes' measured figures, so two clusters of one plan may hold the same model in different
// stages; a dropped cluster that rejoins starts from a training cluster's state, and when none is
// cut as it is, that state is re-cut to its stages here.
//
// Every cluster holds the whole model (every state-dict name: planner/rings.h), so the re-cut
// moves each tensor by its state-dict name: the parameters and buffers, each parameter's
// optimizer state (momentum, Adam's moments and step: whatever the optimizer keeps for it, as it
// is), the param group's options (the lr the LR schedule set) and [outer]'s "global.<name>" and
// "momentum.<name>". What a cluster keeps as one comes from the source cluster: the update and
// batch counts, the epoch, the LR step, the loss scaler, the ring rounds (every stage of a
// cluster counts the same rounds with the other clusters) and the random stream that dropout
// draws from (with two or more random nodes the chain's head's waiting state, with one that
// node's generator: NodeMetadata::random_nodes). So each result is what the target cluster would
// have written had it trained cut that way: a pipeline's arithmetic does not depend on its cut.
//
// Loads the stage files to learn each stage's tensors and its optimizer's order of parameters, as
// a node does (load_stage, optimized_parameters, make_optimizer), on the CPU. Memory: one target
// stage and the source checkpoints that hold its names at a time, never the whole model (the
// requester that calls this may not hold it).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/training/checkpoint.h"

namespace ravnest::training {

// One stage of a cluster: its node's metadata and the path of its stage file here.
struct CutStage {
  config::NodeMetadata node;
  std::string stage_path;
};

// `from`: every stage of the source cluster in pipeline order, and `checkpoint_paths` (same
// order) their checkpoint files of one update boundary of one job. `to`: every stage of the
// target cluster in pipeline order. Calls `write(k, checkpoint)` for each stage k of `to` in
// order, the checkpoint naming its slot (cluster, position) and holding none of the source's
// losses and validation rounds (the target's leaf keeps those it trains from there on). Blocks;
// reads files only. Throws std::runtime_error (one line naming the stage or file) when a stage
// or checkpoint does not load, when a target stage holds a name no source stage holds or holds
// it in another shape, or when the checkpoints are not of one boundary of one job; and what
// `write` throws.
void recut_checkpoints(const std::vector<CutStage>& from,
                       const std::vector<std::string>& checkpoint_paths,
                       const std::vector<CutStage>& to, const config::OptimizerSpec& optimizer,
                       const std::function<void(size_t, const StageCheckpoint&)>& write);

}  // namespace ravnest::training
