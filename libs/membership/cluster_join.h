// `ravnest join` (issue 27 part 4; docs/faults.md#providers-that-come-and-go): new providers from
// the pool become one more cluster of the plan, cut as an existing cluster is. Pure: the plan's
// node files and plan.json as they will be; no file is touched, no daemon asked.
//
// The new cluster is a copy of the `like` cluster: the same stages (the stage files are shared,
// not copied: the bytes are the same), pipeline, inputs, outputs, shared parameters and random
// chain, each of its node ids replaced by the new node at the same position. It takes the next
// cluster id (one above the plan's largest) and joins each cross-cluster ring of its stages as
// the last member (the ring's order is otherwise kept: its last member and its first now point
// to the newcomer). A plan of one cluster has no rings to join: join_cluster leaves the two
// clusters without any, and the caller forms them (planner::assign_rings). Every node's cluster_count grows by one, so that the next job deals the data
// into one more shard (a running job keeps the shards it loaded).
#pragma once

#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::membership {

struct JoinedCluster {
  int cluster = 0;           // the new cluster's id
  std::vector<int> nodes;    // its node ids, root first
  std::vector<int> changed;  // every node whose metadata changed (all of them), the new ones first
};

// Adds the cluster to `nodes` (in place). `newcomers` in pipeline order: one per node of
// cluster `like`. Throws std::runtime_error naming the cluster or node: `like` is no cluster of
// the plan, the count differs from its size, a newcomer's id or address is already in the plan,
// or two newcomers are one node.
JoinedCluster join_cluster(std::vector<config::NodeMetadata>& nodes, int like,
                           const std::vector<config::NodeConfig>& newcomers);

// plan.json's text with the joined cluster added: a cluster entry (the `like` cluster's
// samples_per_second) and the new nodes at the end of the rings they joined. A ring the nodes
// hold that plan.json does not list (a plan of one cluster has no rings: the caller forms them
// for the grown plan, planner::assign_rings) is added with every member in its ring order.
std::string join_cluster_in_plan_json(const std::string& plan_json, int like,
                                      const JoinedCluster& joined,
                                      const std::vector<config::NodeMetadata>& nodes);

}  // namespace ravnest::membership
