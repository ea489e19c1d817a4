// `ravnest replace OLD --with SPARE` (docs/faults.md): a spare node from the pool takes the slot
// of a node that is gone, and the interrupted job resumes with it (`ravnest resume`).
//
// In order: the spare must answer as SPARE and run no job; what is left of the interrupted job
// is stopped on every node (each writes the checkpoint of its last update); the newest
// checkpoint of OLD's slot (from OLD itself if it still answers, else from its keeper,
// libs/config/plan/checkpoint_keeper.h) that every other node also holds is fetched; the spare gets
// OLD's stage, its new metadata and that checkpoint; then the plan directory is
// rewritten (config::replace_node; every file atomically, plan.json last) and the new metadata
// goes to every node whose own changed. While a `ravnest train --drop-failed-clusters` follows
// the job (following_marker.h) and had dropped OLD's cluster, nothing is stopped and no
// checkpoint moves: the spare gets the stage and the plan is rewritten, and that requester does
// the rest when it sees plan.json change (cluster_rejoin.cpp); OLD of a cluster still training is
// refused then. A failure before the plan is rewritten leaves it as it
// was; one after names the nodes that still need `ravnest push`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::requester {

struct Replacement {
  std::string old_name, spare_name;
  int cluster = 0, position = 0;
  std::optional<uint64_t> checkpoint;  // the update moved to the spare, if any
  std::string checkpoint_from;         // the node it came from
  // The pid of the `ravnest train --drop-failed-clusters` that follows the job and had dropped
  // OLD's cluster: nothing was stopped, and that requester brings the cluster back
  // (docs/faults.md#providers-that-come-and-go). 0 otherwise.
  int rejoined_by = 0;
};

// The plan directory with the spare in OLD's slot, no daemon asked: `nodes` as
// config::replace_node left them and the ids it returned. The spare's stage file first (a copy of
// OLD's, unless shared), then the changed node files, plan.json last, then OLD's own files go;
// every file atomically. Also `ravnest pool remove` (docs/planner.md#pools-that-change).
void write_replacement(const std::string& plan_dir, const std::vector<config::NodeMetadata>& nodes,
                       const std::vector<int>& changed, const config::NodeMetadata& old,
                       int spare_id);

// `also_replaced`: other nodes of the plan that are gone and are being replaced too, one after
// the other (`train --elastic` after two nodes of one cluster died: elastic_resume.h). They are
// left out of the checkpoints every other node must hold, are no source of OLD's checkpoint (as
// its keeper), and get no new metadata (their spares get theirs when they are replaced); without
// them, one lost node's replacement would fail on the other that does not answer.
Replacement replace_node(const std::string& plan_dir, const std::string& secret,
                         const std::string& old_name, const config::NodeConfig& spare,
                         const std::function<void(const std::string&)>& log,
                         bool insecure = false, const std::set<std::string>& also_replaced = {});

}  // namespace ravnest::requester
