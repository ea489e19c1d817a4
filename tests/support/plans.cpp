#include "tests/support/plans.h"

#include <string>

namespace ravnest::test {

config::NodeConfig loopback_node(int id, int port) {
  config::NodeConfig node;
  node.id = id;
  node.name = "node_" + std::to_string(id);
  node.host = "127.0.0.1";
  node.port = port;
  node.address = node.host + ":" + std::to_string(port);
  node.ram_gb = 8;
  node.bandwidth_mbps = 1000;
  return node;
}

std::map<int, config::NodeConfig> loopback_nodes(int count, int first_port) {
  std::map<int, config::NodeConfig> nodes;
  for (int k = 0; k < count; ++k) nodes[k] = loopback_node(k, first_port + k);
  return nodes;
}

planner::ClusterPlan cluster_with_cuts(const std::vector<size_t>& cuts, size_t units,
                                       int first_node, int cluster_id) {
  planner::ClusterPlan cluster;
  cluster.id = cluster_id;
  size_t first = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    planner::StagePlan stage;
    stage.node_id = first_node + static_cast<int>(i);
    stage.first_unit = first;
    stage.end_unit = i < cuts.size() ? cuts[i] + 1 : units;
    first = stage.end_unit;
    cluster.stages.push_back(stage);
  }
  return cluster;
}

}  // namespace ravnest::test
