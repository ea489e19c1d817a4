// What a stage puts into its rings: for each ring, the stage's tensors of the ring's names, in
// the ring's order. Every member lists the names in the same order and skips the same ones, so
// the all-reduce lines the tensors up (see WorkerPort::reduce_rings, worker_port.h).
//
// The tensors are the stage's own (a parameter, a buffer, the memory of a gradient or of the
// optimizer's state), so reducing them changes the stage in place.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/stage/stage.h"
#include "libs/worker/transfer.h"

namespace ravnest::worker {

// Across clusters: gradients before an update, parameters and buffers after one (with the
// optimizer's state when `optimizer` is given), or parameters and buffers at the end.
enum class RingTensors { kGradients, kState, kFinal };
std::vector<WorkerPort::RingWork> cluster_ring_work(
    const stage::Stage& stage, const std::vector<config::RingMembership>& rings,
    RingTensors what, torch::optim::Optimizer* optimizer);

// [outer] (DiLoCo, outer_step.h): for each ring, the tensor `deltas` holds under each of the
// ring's names (the outer gradients of trainable parameters), and the stage's buffers (averaged
// at every outer step as at every parameter average); other names are skipped by every member.
std::vector<WorkerPort::RingWork> outer_ring_work(
    const stage::Stage& stage, const std::vector<config::RingMembership>& rings,
    const std::map<std::string, at::Tensor>& deltas);

// Within a cluster: the tensors this stage shares with others (tied names by the name they are
// tied to), per shared ring in the ring's order, rings this stage holds nothing of left out.
// Throws std::runtime_error for a shared name the stage lacks.
struct SharedParameters {
  const config::RingMembership* ring;
  std::vector<at::Tensor> parameters;
};
std::vector<SharedParameters> shared_parameters(const stage::Stage& stage, const config::NodeMetadata& node,
                                               const std::vector<config::RingMembership>& shared_rings);

// Their gradients (zeros where undefined), as one ring work item per ring. Throws as
// shared_parameters.
std::vector<WorkerPort::RingWork> shared_gradient_work(
    const stage::Stage& stage, const config::NodeMetadata& node,
    const std::vector<config::RingMembership>& shared_rings);

}  // namespace ravnest::worker
