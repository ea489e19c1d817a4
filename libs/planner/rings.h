// Rings: which nodes of different clusters hold the same parameters and average them. One ring
// per group of parameters whose holders (one node per cluster) are the same; rings are numbered
// in the order their first parameter appears in cluster 0's pipeline. With one cluster there
// are no rings.
#pragma once

#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/plan/plan_file.h"

namespace ravnest::planner {

struct HeldParameters {
  int node_id = 0;
  int cluster = 0;
  std::vector<std::string> parameters;  // state-dict names, in stage order
};

struct Ring {
  int id = 0;
  std::vector<std::string> parameters;  // in cluster 0's order
  std::vector<int> nodes;               // one per cluster, in cluster order
};

// `holders` lists every node of every cluster (pipeline order within a cluster). A name held by
// several nodes of one cluster is reduced by the first of them.
std::vector<Ring> form_rings(const std::vector<HeldParameters>& holders);

// Ring membership for every node of `nodes` (every cluster's), from the parameters each holds;
// returns plan.json's rings (every member, in cluster order). Each node's own membership holds
// only the ring's size, its position and its two neighbours: the same size whatever the number
// of clusters, so that a plan of thousands of clusters writes bounded node files.
std::vector<config::PlanRing> assign_rings(std::vector<config::NodeMetadata>& nodes);

// Rings inside one cluster for the tensors it holds on several nodes (a module used in two
// stages, tied weights): their gradients are summed over these rings before every update, so
// every copy takes the same step. One ring per set of holders, its parameters the canonical names
// (tied_parameters) in sorted order, its peers the holders by node id; ids from 1 << 30 up, apart
// from the plan's rings, derived from the holders so that every holder computes the same.
std::vector<config::RingMembership> shared_parameter_rings(const config::NodeMetadata& node);

// Every stage of `node`'s cluster, in pipeline order: the ring over which they exchange what the
// update of the whole model needs (gradient norms, the loss scaler's inf/nan). Its id is a hash
// of the members with bit 29 set, apart from the cross-cluster rings (small ids) and the shared
// ones (bit 30).
config::RingMembership cluster_stage_ring(const config::NodeMetadata& node);

}  // namespace ravnest::planner
