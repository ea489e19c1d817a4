// Ring membership when clusters are dropped or come back (libs/membership/ring_membership.h).
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/membership/ring_membership.h"
#include "libs/planner/rings.h"

using ravnest::membership::ring_views;
using ravnest::membership::RingMemberInfo;

namespace {

// `clusters` clusters of two stages each: node 2c+p holds parameter "a" (p=0) or "b" (p=1).
std::vector<ravnest::config::NodeMetadata> two_stage_clusters(int clusters) {
  std::vector<ravnest::config::NodeMetadata> nodes;
  for (int c = 0; c < clusters; ++c) {
    for (int p = 0; p < 2; ++p) {
      ravnest::config::NodeMetadata m;
      m.node_id = 2 * c + p;
      m.name = "node_" + std::to_string(m.node_id);
      m.address = "127.0.0.1:" + std::to_string(9000 + m.node_id);
      m.cluster = c;
      m.position = p;
      m.cluster_size = 2;
      m.cluster_count = clusters;
      m.parameters = {p == 0 ? "a" : "b"};
      nodes.push_back(m);
    }
  }
  return nodes;
}

std::map<int, RingMemberInfo> members_of(const std::vector<ravnest::config::NodeMetadata>& nodes) {
  std::map<int, RingMemberInfo> members;
  for (const auto& m : nodes) members[m.node_id] = {m.cluster, m.address};
  return members;
}

}  // namespace

TEST_CASE("with every cluster live, each node's view is the one its node file holds",
          "[rings][membership]") {
  auto nodes = two_stage_clusters(4);
  const auto rings = ravnest::planner::assign_rings(nodes);
  const auto views = ring_views(rings, members_of(nodes), {0, 1, 2, 3});
  REQUIRE(views.size() == nodes.size());
  for (const auto& m : nodes) {
    const auto& got = views.at(m.node_id);
    REQUIRE(got.size() == m.rings.size());
    for (size_t r = 0; r < got.size(); ++r) {
      CHECK(got[r].id == m.rings[r].id);
      CHECK(got[r].size == m.rings[r].size);
      CHECK(got[r].position == m.rings[r].position);
      CHECK(got[r].next.node == m.rings[r].next.node);
      CHECK(got[r].next.address == m.rings[r].next.address);
      CHECK(got[r].next.cluster == m.rings[r].next.cluster);
      CHECK(got[r].prev.node == m.rings[r].prev.node);
      CHECK(got[r].parameters.empty());
    }
  }
}

TEST_CASE("a dropped cluster leaves the rings; the others keep their order",
          "[rings][membership]") {
  auto nodes = two_stage_clusters(4);
  const auto rings = ravnest::planner::assign_rings(nodes);
  // Cluster 2 (nodes 4 and 5) dropped: rings {0,2,6} and {1,3,7}.
  const auto views = ring_views(rings, members_of(nodes), {0, 1, 3});
  CHECK(views.count(4) == 0);
  CHECK(views.count(5) == 0);
  REQUIRE(views.size() == 6);
  const auto& v2 = views.at(2).at(0);  // cluster 1's first stage
  CHECK(v2.size == 3);
  CHECK(v2.position == 1);
  CHECK(v2.prev.node == 0);
  CHECK(v2.next.node == 6);  // skips node 4
  const auto& v6 = views.at(6).at(0);
  CHECK(v6.position == 2);
  CHECK(v6.next.node == 0);
  CHECK(v6.prev.node == 2);
  const auto& v7 = views.at(7).at(0);
  CHECK(v7.id == views.at(1).at(0).id);
  CHECK(v7.prev.node == 3);
  CHECK(v7.next.node == 1);
  CHECK(v7.next.cluster == 0);

  // Back again (after ravnest replace): the plan's own views.
  const auto all = ring_views(rings, members_of(nodes), {0, 1, 2, 3});
  CHECK(all.at(2).at(0).next.node == 4);
  CHECK(all.at(4).at(0).position == 2);
  CHECK(all.at(4).at(0).size == 4);
}

TEST_CASE("one live cluster: rings of one member, whose neighbours are itself",
          "[rings][membership]") {
  auto nodes = two_stage_clusters(3);
  const auto rings = ravnest::planner::assign_rings(nodes);
  const auto views = ring_views(rings, members_of(nodes), {1});
  REQUIRE(views.size() == 2);
  const auto& v = views.at(3).at(0);
  CHECK(v.size == 1);
  CHECK(v.position == 0);
  CHECK(v.next.node == 3);
  CHECK(v.prev.node == 3);
  CHECK(ring_views(rings, members_of(nodes), {}).empty());
}

TEST_CASE("a ring member missing from the plan's nodes, or two of one cluster, is refused",
          "[rings][membership]") {
  auto nodes = two_stage_clusters(2);
  const auto rings = ravnest::planner::assign_rings(nodes);
  auto members = members_of(nodes);
  members.erase(3);
  CHECK_THROWS_WITH(ring_views(rings, members, {0, 1}),
                    Catch::Contains("node_3 is not in the plan's nodes"));
  members = members_of(nodes);
  members[2].cluster = 0;
  CHECK_THROWS_WITH(ring_views(rings, members, {0, 1}),
                    Catch::Contains("node_2 is a second member of cluster 0"));
}

TEST_CASE("the plan's rings rebuilt from the node files alone", "[rings][membership]") {
  auto nodes = two_stage_clusters(3);
  const auto rings = ravnest::planner::assign_rings(nodes);
  const auto rebuilt = ravnest::membership::rings_of_nodes(nodes);
  REQUIRE(rebuilt.size() == rings.size());
  for (size_t r = 0; r < rings.size(); ++r) {
    CHECK(rebuilt[r].id == rings[r].id);
    CHECK(rebuilt[r].nodes == rings[r].nodes);
  }
  auto broken = nodes;
  broken[2].rings[0].position = 0;  // node 2 claims node 0's place
  CHECK_THROWS_WITH(ravnest::membership::rings_of_nodes(broken),
                    Catch::Contains("both at position 0"));
}

TEST_CASE("the survivors of a ring run from the fewest rounds any of them completed",
          "[rings][membership][churn]") {
  auto nodes = two_stage_clusters(3);
  const auto rings = ravnest::planner::assign_rings(nodes);
  REQUIRE(rings.size() == 2);
  const int first = rings[0].id, second = rings[1].id;
  const auto views = ring_views(rings, members_of(nodes), {0, 1});  // cluster 2 dropped
  // Ring of stage 0: node 0 completed round 6 before node 4 went, node 2 failed it. Ring of
  // stage 1: both failed round 5. Node 4 (dropped) still says 9: it is no member any more.
  std::map<int, std::map<int, uint64_t>> completed = {
      {0, {{first, 7}}}, {2, {{first, 6}}}, {1, {{second, 5}}}, {3, {{second, 5}}},
      {4, {{first, 9}}}};
  auto from = ravnest::membership::rounds_to_run_from(views, completed);
  CHECK(from == std::map<int, uint64_t>{{first, 6}, {second, 5}});
  // A member that did not answer: its ring gets no round (each member runs its own), the other
  // ring still does.
  completed.erase(3);
  from = ravnest::membership::rounds_to_run_from(views, completed);
  CHECK(from == std::map<int, uint64_t>{{first, 6}});
  completed[3] = {};  // answered, but without that ring
  CHECK(ravnest::membership::rounds_to_run_from(views, completed) ==
        std::map<int, uint64_t>{{first, 6}});
  CHECK(ravnest::membership::rounds_to_run_from(views, {}).empty());
}

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("ring membership: the round a member runs first over a membership that names one",
          "[membership][churn]") {
  using ravnest::membership::RoundToRun;
  using ravnest::membership::round_to_run;
  // Failed (or not begun) the round the others run from: run it.
  CHECK(round_to_run(3, 6, 6, std::nullopt) == RoundToRun::kThisRound);
  CHECK(round_to_run(3, 6, 6, 5) == RoundToRun::kThisRound);
  // Completed it while a neighbour failed it: it runs it again first, from the kept inputs.
  CHECK(round_to_run(3, 7, 6, 6) == RoundToRun::kPreviousFirst);
  CHECK(error_of([] { round_to_run(3, 7, 6, std::nullopt); }) ==
        "ring 3: the requester runs it from round 6, but this node is at round 7 and did not "
        "keep the inputs of round 6");
  CHECK(error_of([] { round_to_run(3, 7, 6, 4); }).find("did not keep") != std::string::npos);
  CHECK(error_of([] { round_to_run(3, 8, 6, 7); }) ==
        "ring 3: the requester runs it from round 6, but this node is at round 8 (members more "
        "than one round apart, or a stale count)");
  CHECK(error_of([] { round_to_run(3, 6, 7, 5); }).find("more than one round") !=
        std::string::npos);
  CHECK(error_of([] { round_to_run(3, 0, 5, std::nullopt); }).find("at round 0") !=
        std::string::npos);
}
