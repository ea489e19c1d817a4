// The reference of a job whose clusters were dropped (and maybe came back), from what `train`
// said and what the survivors' daemons logged (docs/faults.md#providers-that-come-and-go,
// #a-dropped-cluster-rejoins): training::train_reference_clusters' `dropped` and `joins`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/training/reference_trainer.h"

namespace ravnest::test {

// The plan's cross-cluster rings (plan.json in `plan_dir`): their ids, and their state names as
// the reference takes them (none for a single ring: one ring of the whole state).
struct PlanRings {
  std::vector<int> ids;
  std::vector<std::vector<std::string>> names;
};
PlanRings plan_rings(const std::string& plan_dir);

// The round each cross-cluster ring ran from over membership `epoch` (the requester sends epoch
// k with its k-th drop: "ring membership epoch k (...; runs from round R (ring K), ...)", the
// first such line of each log), in the order of `ring_ids` -- the rounds the cluster dropped then
// took part in, one a ring. Empty, with `why`, where no single reference fixes the weights: a
// survivor ran a round again for another (the kill landed at a round's end: the survivors differ
// for that round), a ring has no round (a survivor did not answer ringRounds), or two survivors
// were told different rounds of one ring.
std::vector<int64_t> drop_rounds(const std::vector<std::string>& survivor_logs,
                                 const std::vector<int>& ring_ids, std::string* why,
                                 int epoch = 1);

// The reference of `model` (a TorchScript file) in a job of `clusters` clusters and `steps`
// updates (the job file `job_path`, the plan in `plan_dir`) as `said` tells it: each "cluster C
// dropped (" line, in order, is membership epoch 1, 2, ... (its rounds from `survivor_logs`:
// the logs of nodes that trained through every drop; an epoch whose ring got no round, a member
// dropped next not answering, takes the next epoch's round where every survivor failed that round
// over it or the membership before); each "cluster C rejoined after update U:
// ... cluster C from cluster S's checkpoint" brings C back; then `joins` (newcomers). Nothing,
// with `why`, where drop_rounds finds no single round or a drop came after a rejoin (the resumed
// job counts its epochs anew). Throws std::runtime_error when `said` names no drop.
struct DropReference {
  std::map<std::string, at::Tensor> state;
  std::string events;  // what it modelled, for a failure's message
};
std::optional<DropReference> drop_reference(const std::string& said, const std::string& model,
                                            const std::string& plan_dir,
                                            const std::string& job_path, int clusters, int steps,
                                            const std::vector<std::string>& survivor_logs,
                                            std::vector<training::ReferenceJoin> joins,
                                            std::string* why);

}  // namespace ravnest::test
