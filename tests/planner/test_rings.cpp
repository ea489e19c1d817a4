// Rings: which nodes of different clusters average which parameters.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/planner/rings.h"

using ravnest::planner::form_rings;
using ravnest::planner::HeldParameters;
using ravnest::planner::Ring;

namespace {

using Names = std::vector<std::string>;
using Nodes = std::vector<int>;

HeldParameters held(int node, int cluster, Names names) {
  HeldParameters h;
  h.node_id = node;
  h.cluster = cluster;
  h.parameters = std::move(names);
  return h;
}

}  // namespace

TEST_CASE("one cluster has no rings", "[rings]") {
  CHECK(form_rings({held(0, 0, {"a", "b"}), held(1, 0, {"c"})}).empty());
  CHECK(form_rings({}).empty());
}

TEST_CASE("two clusters with the same cut points: one ring per stage", "[rings]") {
  const auto rings = form_rings({held(0, 0, {"a", "b"}), held(1, 0, {"c"}),
                                 held(2, 1, {"a", "b"}), held(3, 1, {"c"})});
  REQUIRE(rings.size() == 2);
  CHECK(rings[0].id == 0);
  CHECK(rings[0].parameters == Names{"a", "b"});
  CHECK(rings[0].nodes == Nodes{0, 2});
  CHECK(rings[1].id == 1);
  CHECK(rings[1].parameters == Names{"c"});
  CHECK(rings[1].nodes == Nodes{1, 3});
}

TEST_CASE("two clusters with different cut points", "[rings]") {
  // Cluster 0 cuts after b, cluster 1 after a.
  const auto rings = form_rings({held(0, 0, {"a", "b"}), held(1, 0, {"c", "d"}),
                                 held(5, 1, {"a"}), held(6, 1, {"b", "c", "d"})});
  REQUIRE(rings.size() == 3);
  CHECK(rings[0].parameters == Names{"a"});
  CHECK(rings[0].nodes == Nodes{0, 5});
  CHECK(rings[1].parameters == Names{"b"});
  CHECK(rings[1].nodes == Nodes{0, 6});
  CHECK(rings[2].parameters == Names{"c", "d"});
  CHECK(rings[2].nodes == Nodes{1, 6});
  for (size_t i = 0; i < rings.size(); ++i) CHECK(rings[i].id == static_cast<int>(i));
}

TEST_CASE("three clusters of different sizes and cut points", "[rings]") {
  // Cluster 0: [p1 p2 | p3 p4 | p5]; cluster 1: [p1 | p2 p3 p4 p5]; cluster 2: one node.
  // Holders are listed out of cluster order: ring nodes still follow cluster order.
  const auto rings = form_rings({
      held(7, 2, {"p1", "p2", "p3", "p4", "p5"}),
      held(3, 1, {"p1"}), held(4, 1, {"p2", "p3", "p4", "p5"}),
      held(0, 0, {"p1", "p2"}), held(1, 0, {"p3", "p4"}), held(2, 0, {"p5"}),
  });
  REQUIRE(rings.size() == 4);
  CHECK(rings[0].parameters == Names{"p1"});
  CHECK(rings[0].nodes == Nodes{0, 3, 7});
  CHECK(rings[1].parameters == Names{"p2"});
  CHECK(rings[1].nodes == Nodes{0, 4, 7});
  CHECK(rings[2].parameters == Names{"p3", "p4"});
  CHECK(rings[2].nodes == Nodes{1, 4, 7});
  CHECK(rings[3].parameters == Names{"p5"});
  CHECK(rings[3].nodes == Nodes{2, 4, 7});
}

TEST_CASE("rings are numbered by their first parameter in cluster 0's pipeline", "[rings]") {
  // Cluster 1 lists its stages in a different order of names; cluster 0's order decides, and
  // a ring whose parameters are not contiguous still forms one ring.
  const auto rings = form_rings({held(0, 0, {"x", "y"}), held(1, 0, {"z", "w"}),
                                 held(2, 1, {"y", "z"}), held(3, 1, {"w", "x"})});
  REQUIRE(rings.size() == 4);
  CHECK(rings[0].parameters == Names{"x"});
  CHECK(rings[0].nodes == Nodes{0, 3});
  CHECK(rings[1].parameters == Names{"y"});
  CHECK(rings[1].nodes == Nodes{0, 2});
  CHECK(rings[2].parameters == Names{"z"});
  CHECK(rings[2].nodes == Nodes{1, 2});
  CHECK(rings[3].parameters == Names{"w"});
  CHECK(rings[3].nodes == Nodes{1, 3});

  const auto grouped = form_rings({held(0, 0, {"a", "b", "c"}), held(1, 0, {"d"}),
                                   held(2, 1, {"a", "d"}), held(3, 1, {"b", "c"})});
  REQUIRE(grouped.size() == 3);
  CHECK(grouped[0].parameters == Names{"a"});
  CHECK(grouped[1].parameters == Names{"b", "c"});
  CHECK(grouped[2].parameters == Names{"d"});
  CHECK(grouped[2].nodes == Nodes{1, 2});
}

TEST_CASE("a name held twice in one cluster is reduced by its first holder", "[rings]") {
  // Tied weights: "emb" is used by the first and the last stage of cluster 0.
  const auto rings = form_rings({held(0, 0, {"emb", "h"}), held(1, 0, {"out", "emb"}),
                                 held(2, 1, {"emb", "h", "out"})});
  REQUIRE(rings.size() == 2);
  CHECK(rings[0].parameters == Names{"emb", "h"});
  CHECK(rings[0].nodes == Nodes{0, 2});
  CHECK(rings[1].parameters == Names{"out"});
  CHECK(rings[1].nodes == Nodes{1, 2});
}

TEST_CASE("a parameter missing from a cluster is an error naming it", "[rings]") {
  try {
    form_rings({held(0, 0, {"a", "b"}), held(1, 1, {"a"}), held(2, 2, {"a", "b"})});
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    CHECK(message.find("\"b\"") != std::string::npos);
    CHECK(message.find("cluster 1") != std::string::npos);
  }
  try {
    form_rings({held(0, 0, {"a"}), held(1, 1, {"a", "extra"})});
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()).find("\"extra\"") != std::string::npos);
  }
}

TEST_CASE("shared parameters get one summing ring per set of holders", "[rings][shared]") {
  ravnest::config::NodeMetadata a;
  a.node_id = 4;
  a.cluster = 1;
  a.addresses = {{2, "h:2"}, {4, "h:4"}, {7, "h:7"}};
  a.shared_parameters = {{"shared.weight", {7, 4}},
                         {"shared.bias", {4, 7}},
                         {"decoder.weight", {2, 4, 7}},
                         {"embedding.weight", {2, 4, 7}}};
  a.tied_parameters = {{"decoder.weight", "embedding.weight"}};
  ravnest::config::NodeMetadata b = a;
  b.node_id = 7;

  const auto rings_a = ravnest::planner::shared_parameter_rings(a);
  const auto rings_b = ravnest::planner::shared_parameter_rings(b);
  REQUIRE(rings_a.size() == 2);
  REQUIRE(rings_b.size() == 2);
  for (size_t r = 0; r < 2; ++r) {
    CHECK(rings_a[r].id == rings_b[r].id);  // every holder derives the same ring
    CHECK(rings_a[r].id >= (1 << 30));
    CHECK(rings_a[r].parameters == rings_b[r].parameters);
  }
  CHECK(rings_a[0].id != rings_a[1].id);
  // Holders {2, 4, 7}: the tied pair is one tensor, named by its canonical name.
  CHECK(rings_a[0].parameters == std::vector<std::string>{"embedding.weight"});
  CHECK(rings_a[0].size == 3);
  CHECK(rings_a[0].position == 1);
  CHECK(rings_a[0].next.node == 7);
  CHECK(rings_a[0].prev.node == 2);
  CHECK(rings_a[0].next.address == "h:7");
  // Holders {4, 7}.
  CHECK(rings_a[1].parameters == std::vector<std::string>{"shared.bias", "shared.weight"});
  CHECK(rings_b[1].position == 1);
  CHECK(rings_b[1].next.node == 4);
}


TEST_CASE("the cluster's stages form one ring, the same on every stage", "[rings][cluster]") {
  ravnest::config::NodeMetadata a;
  a.node_id = 5;
  a.cluster = 1;
  a.pipeline = {3, 5, 8};
  a.addresses = {{3, "h:3"}, {5, "h:5"}, {8, "h:8"}};
  ravnest::config::NodeMetadata b = a;
  b.node_id = 8;
  const auto ring_a = ravnest::planner::cluster_stage_ring(a);
  const auto ring_b = ravnest::planner::cluster_stage_ring(b);
  CHECK(ring_a.id == ring_b.id);
  // Apart from the plan's cross-cluster rings (small ids) and the shared ones (bit 30).
  CHECK((ring_a.id & (1 << 29)) != 0);
  CHECK((ring_a.id & (1 << 30)) == 0);
  REQUIRE(ring_a.size == 3);
  CHECK(ring_a.prev.node == 3);
  CHECK(ring_a.next.address == "h:8");
  CHECK(ring_a.position == 1);
  CHECK(ring_a.next.node == 8);
  CHECK(ring_a.prev.address == "h:3");
  CHECK(ring_b.position == 2);
  CHECK(ring_b.next.node == 3);
  // Another cluster's stages make another ring.
  ravnest::config::NodeMetadata c = a;
  c.pipeline = {4, 6, 9};
  c.node_id = 6;
  CHECK(ravnest::planner::cluster_stage_ring(c).id != ring_a.id);
}

namespace {

// `clusters` clusters of two stages: node 2c holds "a", node 2c+1 holds "b".
std::vector<ravnest::config::NodeMetadata> two_stage_clusters(int clusters) {
  std::vector<ravnest::config::NodeMetadata> nodes;
  for (int c = 0; c < clusters; ++c) {
    for (int p = 0; p < 2; ++p) {
      ravnest::config::NodeMetadata m;
      m.node_id = 2 * c + p;
      m.name = "node_" + std::to_string(m.node_id);
      m.address = "10.0." + std::to_string(m.node_id / 250) + "." +
                  std::to_string(m.node_id % 250) + ":8080";
      m.cluster = 2 * c;
      m.position = p;
      m.cluster_size = 2;
      m.cluster_count = clusters;
      m.parameters = {p == 0 ? "a" : "b"};
      nodes.push_back(m);
    }
  }
  return nodes;
}

size_t largest_node_file(const std::vector<ravnest::config::NodeMetadata>& nodes) {
  size_t largest = 0;
  for (const auto& m : nodes) largest = std::max(largest, ravnest::config::to_json(m).size());
  return largest;
}

}  // namespace

TEST_CASE("a node's rings name its neighbours only: node files do not grow with the clusters",
          "[rings][scale]") {
  auto few = two_stage_clusters(4);
  auto many = two_stage_clusters(3000);
  const auto few_rings = ravnest::planner::assign_rings(few);
  const auto many_rings = ravnest::planner::assign_rings(many);
  REQUIRE(many_rings.size() == 2);
  REQUIRE(many_rings[0].nodes.size() == 3000);
  // Listing every member would add ~50 bytes a cluster; a few digits more per id is all.
  CHECK(largest_node_file(many) <= largest_node_file(few) + 64);
  CHECK(largest_node_file(many) < 2000);

  // The ring each node knows is plan.json's, member for member: walking `next` from its first
  // member visits its nodes in cluster order, each at its position, and `prev` walks back.
  std::map<int, const ravnest::config::NodeMetadata*> by_id;
  for (const auto& m : many) by_id[m.node_id] = &m;
  for (const auto& ring : many_rings) {
    const int n = static_cast<int>(ring.nodes.size());
    for (int k = 0; k < n; ++k) {
      const auto& node = *by_id.at(ring.nodes[static_cast<size_t>(k)]);
      REQUIRE(node.rings.size() == 1);
      const auto& own = node.rings[0];
      REQUIRE(own.id == ring.id);
      CHECK(own.size == n);
      CHECK(own.position == k);
      CHECK(own.next.node == ring.nodes[static_cast<size_t>((k + 1) % n)]);
      CHECK(own.prev.node == ring.nodes[static_cast<size_t>((k + n - 1) % n)]);
      CHECK(own.next.address == by_id.at(own.next.node)->address);
      CHECK(own.next.cluster == by_id.at(own.next.node)->cluster);
    }
  }
  // And a node file read back holds the same ring.
  const auto back = ravnest::config::node_metadata_from_json(ravnest::config::to_json(many[2]), "n");
  CHECK(back.rings.at(0).next.node == many[2].rings.at(0).next.node);
  CHECK(back.rings.at(0).prev.address == many[2].rings.at(0).prev.address);
}
