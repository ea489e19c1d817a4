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

// The round each cross-cluster ring ran from over membership `epoch` of job `job` (the requester
// sends epoch k with the job's k-th drop: "job J: ring membership epoch k (...; runs from round R
// (ring K), ...)", the first such line of each log's part of that job: job_part), in the order
// of `ring_ids` -- the rounds the cluster dropped then took part in, one a ring; a ring whose
// last survivor had completed the round before the membership named it runs from the next, as
// its log says ("... no other member is left to run it again for: runs from round R (ring K)",
// RingMember::catch_up). Empty, with
// `why`, where no single reference fixes the weights: a survivor ran a round again for another
// (the kill landed at a round's end: the survivors differ for that round), a ring has no round (a
// survivor did not answer ringRounds), or two survivors were told different rounds of one ring.
std::vector<int64_t> drop_rounds(const std::vector<std::string>& survivor_logs,
                                 const std::vector<int>& ring_ids, std::string* why,
                                 int epoch = 1, const std::string& job = "",
                                 const std::string& next_job = "");

// The part of a daemon's `log` that job `job` wrote: from its id's first mention ("job J", the
// start of the log when `job` is "", the job a command started first) to `next_job`'s first
// mention after it (the end when "" or not mentioned). "" when `job` is never mentioned.
std::string job_part(const std::string& log, const std::string& job,
                     const std::string& next_job);

// The reference of `model` (a TorchScript file) in a job of `clusters` clusters and `steps`
// updates (the job file `job_path`, the plan in `plan_dir`) as `said` tells it: each "cluster C
// dropped (" line, in order, is membership epoch 1, 2, ... of the job it came in (every take-in,
// "cluster C rejoined|joined after update U: every cluster resumed from there as job J ...",
// resumes the job as J, which counts its epochs anew); its rounds from `survivor_logs`, each
// log's part of that job (the logs of nodes that trained through that drop; an epoch whose ring
// got no round, a member dropped next not answering, takes the next epoch's round where every
// survivor failed that round over it or the membership before), except a drop said "(..., when
// the job resumed after update U)" (a node lost while a take-in resumed the job: its cluster
// left before round U, the resumed job's first); each "cluster C rejoined ...
// cluster C from cluster S's checkpoint" brings C back; then `joins` (newcomers). Nothing, with
// `why`, where drop_rounds finds no single round or a cluster is dropped again after its rejoin
// (the reference drops a cluster once). Throws std::runtime_error when `said` names no drop.
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
