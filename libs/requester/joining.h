// `ravnest join NODE... --like C` (docs/faults.md#providers-that-come-and-go): new providers of
// the pool become one more cluster of the plan, cut as cluster C is (config::join_cluster), while
// no job runs. In order: no plan node runs a job and no requester follows one; each newcomer
// answers as itself and runs no job; each gets its stage and metadata; the plan directory is
// rewritten (the node files atomically, plan.json last); every other node gets its new metadata
// (the ring neighbours, and one more shard everywhere). A failure before the plan is rewritten
// leaves it as it was; one after names the nodes that still need `ravnest push`.
// Joining a running job is not built.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libs/config/plan/cluster_join.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::requester {

config::JoinedCluster join_nodes(const std::string& plan_dir, const std::string& secret,
                                 const std::vector<config::NodeConfig>& newcomers, int like,
                                 const std::function<void(const std::string&)>& log,
                                 bool insecure = false);

}  // namespace ravnest::requester
