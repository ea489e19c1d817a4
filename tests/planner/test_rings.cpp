// Rings: which nodes of different clusters average which parameters.
#include <catch2/catch.hpp>
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
  CHECK(rings_a[0].peers.size() == 3);
  CHECK(rings_a[0].position == 1);
  CHECK(rings_a[0].next_node == 7);
  CHECK(rings_a[0].prev_node == 2);
  CHECK(rings_a[0].peers[2].address == "h:7");
  // Holders {4, 7}.
  CHECK(rings_a[1].parameters == std::vector<std::string>{"shared.bias", "shared.weight"});
  CHECK(rings_b[1].position == 1);
  CHECK(rings_b[1].next_node == 4);
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
  REQUIRE(ring_a.peers.size() == 3);
  CHECK(ring_a.peers[0].node == 3);
  CHECK(ring_a.peers[2].address == "h:8");
  CHECK(ring_a.position == 1);
  CHECK(ring_a.next_node == 8);
  CHECK(ring_a.prev_node == 3);
  CHECK(ring_b.position == 2);
  CHECK(ring_b.next_node == 3);
  // Another cluster's stages make another ring.
  ravnest::config::NodeMetadata c = a;
  c.pipeline = {4, 6, 9};
  c.node_id = 6;
  CHECK(ravnest::planner::cluster_stage_ring(c).id != ring_a.id);
}
