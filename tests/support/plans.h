// Hand-made plans for tests: loopback nodes and clusters cut at chosen units.
#pragma once

#include <map>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"

namespace ravnest::test {

config::NodeConfig loopback_node(int id, int port);
// Nodes 0..count-1 on 127.0.0.1, ports from `first_port` on (never contacted by these tests).
std::map<int, config::NodeConfig> loopback_nodes(int count, int first_port = 19000);

// One stage after each cut (a cut is the unit a stage ends after), the last one up to `units`;
// stage k runs on node `first_node + k`.
planner::ClusterPlan cluster_with_cuts(const std::vector<size_t>& cuts, size_t units,
                                       int first_node = 0, int cluster_id = 0);

}  // namespace ravnest::test
