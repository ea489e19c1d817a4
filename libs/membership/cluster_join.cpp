#include "libs/membership/cluster_join.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "libs/config/plan/node_replacement.h"
#include "libs/config/plan/plan_file.h"
#include "libs/config/plan/plan_layout.h"

namespace ravnest::membership {

using namespace ravnest::config;

JoinedCluster join_cluster(std::vector<NodeMetadata>& nodes, int like,
                           const std::vector<NodeConfig>& newcomers) {
  std::vector<NodeMetadata> model;
  int largest_cluster = -1;
  for (const auto& n : nodes) {
    if (n.role == Role::kServer || n.role == Role::kWorker || n.role == Role::kEvaluator) {
      // Its workers are no pipeline clusters with rings: a parameter-server plan grows with a
      // new `clusterize`.
      throw std::runtime_error("the plan has parameter servers (" + n.name + " is a " +
                               role_name(n.role) + "): ravnest join adds pipeline clusters only");
    }
    largest_cluster = std::max(largest_cluster, n.cluster);
    if (n.cluster == like) model.push_back(n);
  }
  if (model.empty()) {
    throw std::runtime_error("cluster " + std::to_string(like) + " is not in the plan");
  }
  std::sort(model.begin(), model.end(),
            [](const NodeMetadata& a, const NodeMetadata& b) { return a.position < b.position; });
  if (newcomers.size() != model.size()) {
    throw std::runtime_error("cluster " + std::to_string(like) + " has " +
                             std::to_string(model.size()) + " nodes; " +
                             std::to_string(newcomers.size()) + " were given to join as one like it");
  }
  std::set<int> ids;
  std::set<std::string> addresses;
  for (const auto& n : newcomers) {
    for (const auto& m : nodes) {
      if (m.node_id == n.id) {
        throw std::runtime_error(n.name + " is already in the plan (cluster " +
                                 std::to_string(m.cluster) + ")");
      }
      if (m.address == n.address) {
        throw std::runtime_error(n.name + ": its address " + n.address + " is " + m.name +
                                 "'s in the plan");
      }
    }
    if (!ids.insert(n.id).second || !addresses.insert(n.address).second) {
      throw std::runtime_error(n.name + " (" + n.address + ") is given twice");
    }
  }

  JoinedCluster joined;
  joined.cluster = largest_cluster + 1;
  // The copies, each of the model's ids renamed to the newcomer at its position.
  std::vector<NodeMetadata> added = model;
  for (size_t i = 0; i < added.size(); ++i) {
    auto& n = added[i];
    n.node_id = newcomers[i].id;
    n.name = newcomers[i].name;
    n.address = newcomers[i].address;
    n.cluster = joined.cluster;
    for (size_t j = 0; j < model.size(); ++j) {
      rename_node_mentions(n, model[j].node_id, newcomers[j].id, newcomers[j].address);
    }
    joined.nodes.push_back(n.node_id);
  }
  // Each ring the model's stages belong to gets the newcomer of that stage as its last member.
  std::map<int, int> joiner_of_ring;  // ring id -> the newcomer joining it
  for (const auto& n : added) {
    for (const auto& ring : n.rings) joiner_of_ring[ring.id] = n.node_id;
  }
  nodes.insert(nodes.end(), added.begin(), added.end());
  auto find = [&](int id) -> NodeMetadata& {
    return *std::find_if(nodes.begin(), nodes.end(),
                         [&](const NodeMetadata& n) { return n.node_id == id; });
  };
  for (const auto& [ring_id, joiner_id] : joiner_of_ring) {
    // The ring's current members by position (the newcomer's copy still says the model's place).
    std::vector<std::pair<int, int>> members;  // position, node id
    for (const auto& n : nodes) {
      if (n.node_id == joiner_id) continue;
      for (const auto& r : n.rings) {
        if (r.id == ring_id) members.emplace_back(r.position, n.node_id);
      }
    }
    std::sort(members.begin(), members.end());
    members.emplace_back(static_cast<int>(members.size()), joiner_id);
    const int size = static_cast<int>(members.size());
    for (int p = 0; p < size; ++p) {
      auto& n = find(members[p].second);
      // (A structured binding cannot be captured before C++20; clang says so.)
      auto& r = *std::find_if(n.rings.begin(), n.rings.end(),
                              [id = ring_id](const RingMembership& m) { return m.id == id; });
      const auto& next = find(members[(p + 1) % size].second);
      const auto& prev = find(members[(p + size - 1) % size].second);
      r.size = size;
      r.position = p;
      r.next = {next.node_id, next.cluster, next.address};
      r.prev = {prev.node_id, prev.cluster, prev.address};
    }
  }
  // One more cluster everywhere; the newcomers' pinned certificates pinned by every node.
  for (auto& n : nodes) {
    n.cluster_count += 1;
    for (const auto& c : newcomers) {
      if (!c.tls_fingerprint.empty()) n.tls_fingerprints[c.address] = c.tls_fingerprint;
    }
  }
  joined.changed = joined.nodes;
  for (const auto& n : nodes) {
    if (n.cluster != joined.cluster) joined.changed.push_back(n.node_id);
  }
  return joined;
}

std::string join_cluster_in_plan_json(const std::string& plan_json, int like,
                                      const JoinedCluster& joined,
                                      const std::vector<NodeMetadata>& nodes) {
  PlanFile plan = plan_file_from_json(plan_json, PlanLayout::kPlanFile);
  auto model = std::find_if(plan.clusters.begin(), plan.clusters.end(),
                            [&](const PlanCluster& c) { return c.id == like; });
  if (model == plan.clusters.end()) {
    throw std::runtime_error(std::string(PlanLayout::kPlanFile) + ": no cluster " +
                             std::to_string(like));
  }
  PlanCluster added;
  added.id = joined.cluster;
  added.samples_per_second = model->samples_per_second;
  added.nodes = joined.nodes;
  plan.clusters.push_back(added);
  for (auto& ring : plan.rings) {
    for (const auto& n : nodes) {
      if (n.cluster != joined.cluster) continue;
      for (const auto& r : n.rings) {
        if (r.id == ring.id) ring.nodes.push_back(n.node_id);
      }
    }
  }
  // Rings the nodes have and plan.json has not (a plan of one cluster had none; the caller formed
  // them for the grown plan): every member, by its place in the ring.
  std::map<int, std::map<int, int>> members;  // ring id -> position -> node id
  std::map<int, std::vector<std::string>> parameters;
  for (const auto& n : nodes) {
    for (const auto& r : n.rings) {
      members[r.id][r.position] = n.node_id;
      parameters[r.id] = r.parameters;
    }
  }
  for (const auto& [id, by_position] : members) {
    const bool listed = std::any_of(plan.rings.begin(), plan.rings.end(),
                                    [id = id](const PlanRing& r) { return r.id == id; });
    if (listed) continue;
    PlanRing ring;
    ring.id = id;
    ring.parameters = parameters[id];
    for (const auto& [position, node] : by_position) ring.nodes.push_back(node);
    plan.rings.push_back(std::move(ring));
  }
  std::sort(plan.rings.begin(), plan.rings.end(),
            [](const PlanRing& a, const PlanRing& b) { return a.id < b.id; });
  return to_json(plan);
}

}  // namespace ravnest::membership
