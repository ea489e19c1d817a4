// join_cluster (new providers become one more cluster, cut like an existing one), on plain
// metadata: every mention of the model cluster's nodes renamed in the copy, the rings closed
// again through the newcomer, and bad input refused naming the node.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "libs/membership/cluster_join.h"
#include "libs/config/plan/plan_file.h"

using namespace ravnest::config;
using namespace ravnest::membership;

namespace {

std::string address_of(int id) { return "127.0.0.1:" + std::to_string(9000 + id); }

// Two clusters (ids 0 and 3) of three stages (nodes 0,1,2 and 3,4,5); node 0 also feeds node 2;
// stages 1 and 2 average across clusters (rings 1 and 2); nodes 0 and 2 share a tied embedding.
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
      n.stage_file = "stages/node_" + std::to_string(p) + ".pt";
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
        ring.parameters = {"layer" + std::to_string(p) + ".weight"};
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

NodeConfig provider(int id, const std::string& fingerprint = "") {
  NodeConfig s;
  s.id = id;
  s.name = "node_" + std::to_string(id);
  s.address = address_of(id);
  s.tls_fingerprint = fingerprint;
  return s;
}

const NodeMetadata& by_id(const std::vector<NodeMetadata>& nodes, int id) {
  for (const auto& n : nodes) {
    if (n.node_id == id) return n;
  }
  throw std::runtime_error("no node " + std::to_string(id));
}

const RingMembership& ring_of(const NodeMetadata& n, int ring) {
  for (const auto& r : n.rings) {
    if (r.id == ring) return r;
  }
  throw std::runtime_error(n.name + " is in no ring " + std::to_string(ring));
}

}  // namespace

TEST_CASE("join_cluster: the newcomers become a copy of the model cluster under their own ids",
          "[cluster_join]") {
  auto nodes = two_clusters();
  const auto before = nodes;
  const auto joined = join_cluster(nodes, 3, {provider(7), provider(8), provider(9, "ab")});
  CHECK(joined.cluster == 4);  // one above the largest id (3), not the count
  CHECK(joined.nodes == std::vector<int>{7, 8, 9});
  REQUIRE(nodes.size() == 9);
  CHECK(joined.changed.size() == 9);
  CHECK(std::vector<int>(joined.changed.begin(), joined.changed.begin() + 3) == joined.nodes);

  const std::map<int, std::string> addresses{{7, address_of(7)}, {8, address_of(8)},
                                             {9, address_of(9)}};
  for (int p = 0; p < 3; ++p) {
    const auto& n = by_id(nodes, 7 + p);
    const auto& model = by_id(before, 3 + p);
    CHECK(n.name == "node_" + std::to_string(7 + p));
    CHECK(n.address == address_of(7 + p));
    CHECK(n.cluster == 4);
    CHECK(n.position == p);
    CHECK(n.cluster_count == 3);
    CHECK(n.stage_file == model.stage_file);  // the same stage, shared
    CHECK(n.pipeline == std::vector<int>{7, 8, 9});
    CHECK(n.addresses == addresses);
    CHECK(n.random_nodes == std::vector<int>{7, 8});
    if (p > 0) {
      REQUIRE(n.inputs.size() == 1);
      CHECK(*n.inputs[0].from_node == 7 + p - 1);
      CHECK(n.backward_neighbours == std::vector<int>{7 + p - 1});
    }
    if (p == 0) CHECK(n.forward_neighbours == std::vector<int>{8, 9});
    if (p != 1) CHECK(n.shared_parameters.at("embed.weight") == std::vector<int>{7, 9});
    CHECK(n.tls_fingerprints.at(address_of(9)) == "ab");
  }
  // The old clusters are as they were but for the count, the rings and the pins.
  for (int id : {0, 1, 2, 3, 4, 5}) {
    const auto& n = by_id(nodes, id);
    const auto& was = by_id(before, id);
    CHECK(n.cluster == was.cluster);
    CHECK(n.pipeline == was.pipeline);
    CHECK(n.addresses == was.addresses);
    CHECK(n.cluster_count == 3);
    CHECK(n.tls_fingerprints.size() == 1);
  }
}

TEST_CASE("join_cluster: each ring closes again through its newcomer, last", "[cluster_join]") {
  auto nodes = two_clusters();
  join_cluster(nodes, 0, {provider(7), provider(8), provider(9)});
  for (int ring : {1, 2}) {
    // Members in position order: cluster 0's, cluster 3's, the newcomer's.
    const std::vector<int> order{ring, 3 + ring, 7 + ring};
    for (int p = 0; p < 3; ++p) {
      const auto& r = ring_of(by_id(nodes, order[p]), ring);
      INFO("ring " << ring << ", node " << order[p]);
      CHECK(r.size == 3);
      CHECK(r.position == p);
      CHECK(r.next.node == order[(p + 1) % 3]);
      CHECK(r.next.address == address_of(order[(p + 1) % 3]));
      CHECK(r.prev.node == order[(p + 2) % 3]);
      CHECK(r.next.cluster == by_id(nodes, order[(p + 1) % 3]).cluster);
      CHECK(r.parameters == std::vector<std::string>{"layer" + std::to_string(ring) + ".weight"});
    }
  }
  CHECK(by_id(nodes, 7).rings.empty());  // the root is in no ring, as its model's is not
}

TEST_CASE("join_cluster: plan.json gets the cluster and the rings their new members",
          "[cluster_join]") {
  auto nodes = two_clusters();
  PlanFile plan;
  plan.clusters = {{0, 10.0, {0, 1, 2}}, {3, 12.0, {3, 4, 5}}};
  plan.rings = {{1, {"layer1.weight"}, {1, 4}}, {2, {"layer2.weight"}, {2, 5}}};
  const auto joined = join_cluster(nodes, 3, {provider(7), provider(8), provider(9)});
  const auto after =
      plan_file_from_json(join_cluster_in_plan_json(to_json(plan), 3, joined, nodes), "plan.json");
  REQUIRE(after.clusters.size() == 3);
  CHECK(after.clusters[2].id == 4);
  CHECK(after.clusters[2].nodes == std::vector<int>{7, 8, 9});
  CHECK(after.clusters[2].samples_per_second == 12.0);
  CHECK(after.rings[0].nodes == std::vector<int>{1, 4, 8});
  CHECK(after.rings[1].nodes == std::vector<int>{2, 5, 9});
}

TEST_CASE("join_cluster: a plan of one cluster gets in plan.json the rings formed for two",
          "[cluster_join]") {
  auto nodes = two_clusters();
  nodes.resize(3);  // cluster 0 alone: no rings
  for (auto& n : nodes) {
    n.rings.clear();
    n.cluster_count = 1;
  }
  PlanFile plan;
  plan.clusters = {{0, 10.0, {0, 1, 2}}};
  const auto joined = join_cluster(nodes, 0, {provider(7), provider(8), provider(9)});
  CHECK(joined.cluster == 1);
  for (const auto& n : nodes) CHECK(n.rings.empty());  // join_cluster forms none
  // As planner::assign_rings forms them (stages 1 and 2 hold parameters); listed by id.
  for (int p : {2, 1}) {
    for (int c : {0, 1}) {
      const int id = c == 0 ? p : 7 + p;
      auto& n = *std::find_if(nodes.begin(), nodes.end(),
                              [id](const NodeMetadata& m) { return m.node_id == id; });
      RingMembership ring;
      ring.id = p - 1;
      ring.parameters = {"layer" + std::to_string(p) + ".weight"};
      ring.size = 2;
      ring.position = c;
      n.rings.push_back(ring);
    }
  }
  const auto after =
      plan_file_from_json(join_cluster_in_plan_json(to_json(plan), 0, joined, nodes), "plan.json");
  REQUIRE(after.rings.size() == 2);
  CHECK(after.rings[0].id == 0);
  CHECK(after.rings[0].nodes == std::vector<int>{1, 8});
  CHECK(after.rings[0].parameters == std::vector<std::string>{"layer1.weight"});
  CHECK(after.rings[1].nodes == std::vector<int>{2, 9});
}

TEST_CASE("join_cluster: refuses what cannot join, and leaves the plan as it was",
          "[cluster_join]") {
  auto nodes = two_clusters();
  const auto before = to_json(nodes[0]);
  CHECK_THROWS_WITH(join_cluster(nodes, 1, {provider(7)}),
                    Catch::Contains("cluster 1 is not in the plan"));
  CHECK_THROWS_WITH(join_cluster(nodes, 0, {provider(7), provider(8)}),
                    Catch::Contains("cluster 0 has 3 nodes; 2 were given"));
  CHECK_THROWS_WITH(join_cluster(nodes, 0, {provider(7), provider(4), provider(9)}),
                    Catch::Contains("node_4 is already in the plan (cluster 3)"));
  CHECK_THROWS_WITH(join_cluster(nodes, 0, {provider(7), provider(7), provider(9)}),
                    Catch::Contains("node_7 (127.0.0.1:9007) is given twice"));
  auto same_address = provider(8);
  same_address.address = address_of(2);
  CHECK_THROWS_WITH(join_cluster(nodes, 0, {provider(7), same_address, provider(9)}),
                    Catch::Contains("its address 127.0.0.1:9002 is node_2's"));
  CHECK(nodes.size() == 6);
  CHECK(to_json(nodes[0]) == before);
}

TEST_CASE("join_cluster refuses a parameter-server plan") {
  auto nodes = two_clusters();
  nodes[1].role = Role::kWorker;
  NodeConfig n;
  n.id = 9;
  n.name = "node_9";
  n.address = "127.0.0.1:9009";
  std::vector<NodeConfig> three(3, n);
  try {
    join_cluster(nodes, 0, three);
    FAIL("no error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()) ==
          "the plan has parameter servers (node_1 is a worker): ravnest join adds pipeline "
          "clusters only");
  }
}
