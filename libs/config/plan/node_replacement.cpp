#include "libs/config/plan/node_replacement.h"

#include <algorithm>
#include <stdexcept>


#include "libs/config/plan/plan_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

bool rename_node_mentions(NodeMetadata& node, int from, int to, const std::string& address) {
  bool changed = false;
  auto id = [&](int& v) {
    if (v == from) {
      v = to;
      changed = true;
    }
  };
  auto ids = [&](std::vector<int>& vs) {
    for (int& v : vs) id(v);
  };
  ids(node.pipeline);
  auto it = node.addresses.find(from);
  if (it != node.addresses.end()) {
    node.addresses.erase(it);
    node.addresses[to] = address;
    changed = true;
  }
  for (auto& input : node.inputs) {
    if (input.from_node) id(*input.from_node);
  }
  for (auto& output : node.outputs) ids(output.to_nodes);
  ids(node.forward_neighbours);
  ids(node.backward_neighbours);
  for (auto& [name, holders] : node.shared_parameters) ids(holders);
  ids(node.random_nodes);
  for (auto& ring : node.rings) {
    for (RingPeer* peer : {&ring.next, &ring.prev}) {
      if (peer->node == from) {
        peer->node = to;
        peer->address = address;
        changed = true;
      }
    }
  }
  return changed;
}

std::vector<int> replace_node(std::vector<NodeMetadata>& nodes, int old_id, const NodeConfig& spare) {
  auto old = std::find_if(nodes.begin(), nodes.end(),
                          [&](const NodeMetadata& n) { return n.node_id == old_id; });
  if (old == nodes.end()) {
    throw std::runtime_error(node_name(old_id) + " is not in the plan");
  }
  for (const auto& n : nodes) {
    if (n.node_id == spare.id) {
      throw std::runtime_error(spare.name + " is already in the plan (cluster " +
                               std::to_string(n.cluster) + "); a spare must be a pool node "
                               "the plan does not use");
    }
    if (n.address == spare.address) {
      throw std::runtime_error(spare.name + ": its address " + spare.address + " is " + n.name +
                               "'s in the plan");
    }
  }
  const std::string old_address = old->address;
  old->node_id = spare.id;
  old->name = spare.name;
  old->address = spare.address;
  // A stage file other nodes share (clusters cut alike) stays where it is; the node's own
  // moves to the spare's name.
  const bool shared = std::count_if(nodes.begin(), nodes.end(), [&](const NodeMetadata& n) {
                        return n.stage_file == old->stage_file;
                      }) > 1;
  if (!shared) old->stage_file = PlanLayout::stage_file(spare.id);
  std::vector<int> changed{spare.id};
  for (auto& node : nodes) {
    bool renamed = rename_node_mentions(node, old_id, spare.id, spare.address);
    // The old node's pinned certificate goes, the spare's (if the pool pins one) comes.
    auto pins = node.tls_fingerprints;
    pins.erase(old_address);
    if (!spare.tls_fingerprint.empty()) pins[spare.address] = spare.tls_fingerprint;
    if (pins != node.tls_fingerprints) {
      node.tls_fingerprints = std::move(pins);
      renamed = true;
    }
    if (renamed && node.node_id != spare.id) changed.push_back(node.node_id);
  }
  return changed;
}

std::string replace_node_in_plan_json(const std::string& plan_json, int old_id, int new_id) {
  PlanFile plan = plan_file_from_json(plan_json, PlanLayout::kPlanFile);
  auto rename_in = [&](std::vector<int>& nodes) {
    std::replace(nodes.begin(), nodes.end(), old_id, new_id);
  };
  for (auto& cluster : plan.clusters) rename_in(cluster.nodes);
  for (auto& ring : plan.rings) rename_in(ring.nodes);
  return to_json(plan);
}

}  // namespace ravnest::config
