// replace_node (a spare takes a dead node's slot) and checkpoint_keeper, on plain metadata.
#include <catch2/catch.hpp>

#include <map>

#include <nlohmann/json.hpp>

#include "libs/config/plan/checkpoint_keeper.h"
#include "libs/config/plan/node_replacement.h"

using namespace ravnest::config;

namespace {

std::string address_of(int id) { return "127.0.0.1:" + std::to_string(9000 + id); }

// Two clusters of three stages (0,1,2 and 3,4,5); node 0's output also skips to node 2; node 1
// and node 4 share a ring, and so do 2 and 5; nodes 0 and 2 share a tied embedding.
std::vector<NodeMetadata> two_clusters() {
  std::vector<NodeMetadata> nodes;
  for (int c = 0; c < 2; ++c) {
    const int base = 3 * c;
    for (int p = 0; p < 3; ++p) {
      NodeMetadata n;
      n.node_id = base + p;
      n.name = "node_" + std::to_string(n.node_id);
      n.address = address_of(n.node_id);
      n.cluster = base;
      n.position = p;
      n.cluster_size = 3;
      n.cluster_count = 2;
      n.stage_file = "stages/node_" + std::to_string(n.node_id) + ".pt";
      n.pipeline = {base, base + 1, base + 2};
      for (int q = 0; q < 3; ++q) n.addresses[base + q] = address_of(base + q);
      if (p > 0) {
        StageInput in;
        in.from_node = base + p - 1;
        in.from_output = 0;
        n.inputs.push_back(in);
        n.backward_neighbours = {base + p - 1};
      }
      if (p < 2) {
        StageOutput out;
        out.to_nodes = {base + p + 1};
        if (p == 0) out.to_nodes.push_back(base + 2);
        n.outputs.push_back(out);
        n.forward_neighbours = out.to_nodes;
      }
      if (p != 1) n.shared_parameters["embed.weight"] = {base, base + 2};
      n.random_nodes = {base, base + 1};
      if (p > 0) {
        RingMembership ring;
        ring.id = p;
        ring.size = 2;
        ring.position = c;
        const int other = c == 0 ? 3 + p : p;
        ring.next = {other, c == 0 ? 3 : 0, address_of(other)};
        ring.prev = ring.next;
        n.rings.push_back(ring);
      }
      nodes.push_back(n);
    }
  }
  return nodes;
}

NodeConfig spare(int id) {
  NodeConfig s;
  s.id = id;
  s.name = "node_" + std::to_string(id);
  s.address = address_of(id);
  return s;
}

const NodeMetadata& by_id(const std::vector<NodeMetadata>& nodes, int id) {
  for (const auto& n : nodes) {
    if (n.node_id == id) return n;
  }
  throw std::runtime_error("no node " + std::to_string(id));
}

}  // namespace

TEST_CASE("a spare takes the slot whole and every mention of the old node", "[replace]") {
  auto nodes = two_clusters();
  const auto changed = replace_node(nodes, 1, spare(7));
  CHECK(changed == std::vector<int>{7, 0, 2, 4});

  const auto& s = by_id(nodes, 7);
  CHECK(s.name == "node_7");
  CHECK(s.address == address_of(7));
  CHECK(s.cluster == 0);
  CHECK(s.position == 1);
  CHECK(s.stage_file == "stages/node_7.pt");
  CHECK(s.pipeline == std::vector<int>{0, 7, 2});
  CHECK(s.addresses.count(1) == 0);
  CHECK(s.addresses.at(7) == address_of(7));
  CHECK(s.rings.at(0).position == 0);  // its place in the ring, beside the same neighbour
  CHECK(s.rings.at(0).next.node == 4);
  CHECK(s.random_nodes == std::vector<int>{0, 7});

  const auto& root = by_id(nodes, 0);
  CHECK(root.outputs.at(0).to_nodes == std::vector<int>{7, 2});
  CHECK(root.forward_neighbours == std::vector<int>{7, 2});
  CHECK(root.shared_parameters.at("embed.weight") == std::vector<int>{0, 2});
  const auto& leaf = by_id(nodes, 2);
  CHECK(*leaf.inputs.at(0).from_node == 7);
  CHECK(leaf.backward_neighbours == std::vector<int>{7});
  const auto& peer = by_id(nodes, 4);
  CHECK(peer.rings.at(0).next.node == 7);
  CHECK(peer.rings.at(0).prev.node == 7);
  CHECK(peer.rings.at(0).next.address == address_of(7));
  CHECK(peer.rings.at(0).prev.address == address_of(7));
  // The other cluster's root and leaf never named node 1.
  CHECK(by_id(nodes, 5).rings.at(0).next.node == 2);
}

TEST_CASE("replace_node refuses what cannot be a replacement", "[replace]") {
  auto nodes = two_clusters();
  CHECK_THROWS_WITH(replace_node(nodes, 9, spare(7)), "node_9 is not in the plan");
  CHECK_THROWS_WITH(replace_node(nodes, 1, spare(4)), Catch::Contains("node_4 is already in the plan"));
  NodeConfig same_address = spare(7);
  same_address.address = address_of(2);
  CHECK_THROWS_WITH(replace_node(nodes, 1, same_address), Catch::Contains("is node_2's in the plan"));
  CHECK(by_id(nodes, 1).name == "node_1");  // a refused replacement changes nothing
}

TEST_CASE("plan.json names the spare in its clusters and rings", "[replace]") {
  const std::string text = R"({"format": "ravnest.plan/1", "clusters": [{"id": 0, "nodes": [0, 1, 2]},
    {"id": 3, "nodes": [3, 4, 5]}], "rings": [{"id": 1, "nodes": [1, 4]}], "seed": 1})";
  const auto json = nlohmann::json::parse(replace_node_in_plan_json(text, 1, 7));
  CHECK(json.at("clusters").at(0).at("nodes") == nlohmann::json({0, 7, 2}));
  CHECK(json.at("clusters").at(1).at("nodes") == nlohmann::json({3, 4, 5}));
  CHECK(json.at("rings").at(0).at("nodes") == nlohmann::json({7, 4}));
  CHECK(json.at("seed") == 1);
}

TEST_CASE("the keeper is the next stage of the cluster, else the next ring member", "[replace]") {
  auto nodes = two_clusters();
  CHECK(checkpoint_keeper(by_id(nodes, 0))->node == 1);
  CHECK(checkpoint_keeper(by_id(nodes, 2))->node == 0);  // cyclic
  CHECK(checkpoint_keeper(by_id(nodes, 5))->address == address_of(3));
  replace_node(nodes, 1, spare(7));
  CHECK(checkpoint_keeper(by_id(nodes, 0))->node == 7);

  NodeMetadata alone;  // a cluster of one, in a ring with another cluster's node
  alone.node_id = 3;
  alone.pipeline = {3};
  alone.addresses[3] = address_of(3);
  RingMembership ring;
  ring.size = 2;
  ring.position = 1;
  ring.next = {0, 0, address_of(0)};
  ring.prev = ring.next;
  alone.rings.push_back(ring);
  CHECK(checkpoint_keeper(alone)->node == 0);
  alone.rings.clear();
  CHECK_FALSE(checkpoint_keeper(alone).has_value());
}

TEST_CASE("the old node's pinned certificate goes, the spare's comes, to every node",
          "[replace][pinned]") {
  auto nodes = two_clusters();
  const std::string old_pin(64, 'a'), other_pin(64, 'b'), spare_pin(64, 'e');
  for (auto& n : nodes) n.tls_fingerprints = {{address_of(1), old_pin}, {address_of(2), other_pin}};
  NodeConfig s = spare(9);
  s.tls_fingerprint = spare_pin;
  const auto changed = replace_node(nodes, 1, s);
  for (const auto& n : nodes) {
    INFO(n.name);
    CHECK(n.tls_fingerprints ==
          std::map<std::string, std::string>{{address_of(2), other_pin}, {s.address, spare_pin}});
  }
  // Every node's metadata changed, so every node is pushed anew.
  CHECK(changed.size() == nodes.size());
}

TEST_CASE("a stage file other nodes share stays where it is for the spare", "[replace]") {
  auto nodes = two_clusters();
  // The two clusters cut alike: the second's nodes name the first's files (issue 26).
  for (auto& n : nodes) n.stage_file = "stages/node_" + std::to_string(n.position) + ".pt";
  replace_node(nodes, 1, spare(7));
  CHECK(by_id(nodes, 7).stage_file == "stages/node_1.pt");
  CHECK(by_id(nodes, 4).stage_file == "stages/node_1.pt");
}
