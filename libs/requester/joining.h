// `ravnest join NODE... --like C` (docs/faults.md#providers-that-come-and-go): new providers of
// the pool become one more cluster of the plan, cut as cluster C is (membership::join_cluster), while
// no job runs. In order: no plan node runs a job and no requester follows one; each newcomer
// answers as itself and runs no job; each gets its stage and metadata; the plan directory is
// rewritten (the node files atomically, plan.json last); every other node gets its new metadata
// (the ring neighbours, and one more shard everywhere). A failure before the plan is rewritten
// leaves it as it was; one after names the nodes that still need `ravnest push`. The plan
// directory is locked throughout (base::EditLock): two joins at the same moment run one after
// the other, the second joining as the next cluster.
//
// While a job runs that the `ravnest train` which started it follows (its marker,
// following_marker.h), the plan's nodes are neither asked nor given their metadata: the
// newcomers get their stages, the plan is rewritten, and the follower takes the new cluster in
// at the next update boundary (running_plan_change.cpp). A job that runs unfollowed is refused.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libs/membership/cluster_join.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::requester {

struct Joining {
  membership::JoinedCluster joined;
  uint64_t job_id = 0;   // the followed job that takes the cluster in; 0: none ran
  int follower_pid = 0;  // the `ravnest train` following it
};

Joining join_nodes(const std::string& plan_dir, const std::string& secret,
                                 const std::vector<config::NodeConfig>& newcomers, int like,
                                 const std::function<void(const std::string&)>& log,
                                 bool insecure = false);

}  // namespace ravnest::requester
