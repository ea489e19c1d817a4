// What `train --elastic` does on a lost node (libs/tracker/elastic_choice.h): the replacement that
// fits, or the cluster dropped; and which idle nodes join as one more cluster; plain data, no
// processes.
#include <catch2/catch.hpp>

#include "libs/tracker/elastic_choice.h"

namespace rt = ravnest::tracker;

namespace {

std::map<std::string, rt::Member> pool_of(const std::vector<std::pair<std::string, uint64_t>>& nodes) {
  std::map<std::string, rt::Member> pool;
  for (const auto& [name, memory] : nodes) {
    rt::Member m;
    m.registration.name = name;
    m.registration.addresses = {"127.0.0.1:1"};
    m.registration.hardware.memory_bytes = memory;
    pool[name] = m;
  }
  return pool;
}

const std::vector<rt::PlannedNode> plan = {
    {"node_0", 0, 4'000}, {"node_1", 0, 6'000}, {"node_2", 1, 4'000}, {"node_3", 1, 6'000}};

}  // namespace

TEST_CASE("elastic: a lost node is replaced by the idle node that fits, never one in the plan") {
  auto pool = pool_of({{"node_0", 9'000}, {"node_2", 9'000}, {"node_3", 9'000},
                       {"node_7", 5'000}, {"node_8", 7'000}});
  auto changes = rt::choose_elastic_changes(plan, {"node_1"}, pool);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].kind == rt::ElasticChange::Kind::replace);
  CHECK(changes[0].lost == "node_1");
  CHECK(changes[0].replacement == "node_8");  // node_7 has less than the stage needs
  CHECK(changes[0].cluster == 0);
  CHECK(changes[0].line() == "elastic: node_1 lost; node_8 takes its place in cluster 0");
}

TEST_CASE("elastic: no idle node fits, the lost node's cluster is dropped once") {
  auto pool = pool_of({{"node_0", 9'000}, {"node_1", 9'000}, {"node_7", 3'000}});
  auto changes = rt::choose_elastic_changes(plan, {"node_3", "node_2"}, pool);
  REQUIRE(changes.size() == 1);  // node_2 first (name order): dropped; node_3's cluster is gone too
  CHECK(changes[0].kind == rt::ElasticChange::Kind::drop_cluster);
  CHECK(changes[0].lost == "node_2");
  CHECK(changes[0].cluster == 1);
  CHECK(changes[0].line() == "elastic: node_2 lost; no idle node fits, cluster 1 dropped");
  CHECK(changes[0].line("no heartbeat for 30 s") ==
        "elastic: node_2 lost (no heartbeat for 30 s); no idle node fits, cluster 1 dropped");
}

TEST_CASE("elastic: two lost nodes never get the same replacement; ties go to the smallest name") {
  auto pool = pool_of({{"node_9", 8'000}, {"node_8", 8'000}});
  auto changes = rt::choose_elastic_changes(plan, {"node_1", "node_3"}, pool);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].replacement == "node_8");
  CHECK(changes[1].replacement == "node_9");
  CHECK(changes[1].cluster == 1);
}

TEST_CASE("elastic: a lost name that is not in the plan changes nothing") {
  auto changes = rt::choose_elastic_changes(plan, {"node_5"}, pool_of({{"node_8", 8'000}}));
  CHECK(changes.empty());
}

TEST_CASE("elastic: idle nodes join as one more cluster only when every stage has one that fits") {
  // Stages needing 4,000 then 6,000: the root takes the most memory that fits, then the leaf the
  // most of what is left.
  auto joined = rt::choose_join({4'000, 6'000}, pool_of({{"node_7", 9'000}, {"node_8", 6'000}}));
  CHECK(joined == std::vector<std::string>{"node_7", "node_8"});
  CHECK(rt::join_line(joined, 2) ==
        "elastic: node_7 and node_8 registered; they join as cluster 2 at the next update "
        "boundary");
  CHECK(rt::join_line({"node_4"}, 1) ==
        "elastic: node_4 registered; it joins as cluster 1 at the next update boundary");
  // One node for two stages, or none that fits the leaf: no join.
  CHECK(rt::choose_join({4'000, 6'000}, pool_of({{"node_7", 9'000}})).empty());
  CHECK(rt::choose_join({4'000, 6'000}, pool_of({{"node_7", 5'000}, {"node_8", 5'000}})).empty());
  CHECK(rt::choose_join({}, pool_of({{"node_7", 5'000}})).empty());
  // Ties go to the smallest name.
  CHECK(rt::choose_join({1'000}, pool_of({{"node_9", 5'000}, {"node_8", 5'000}})) ==
        std::vector<std::string>{"node_8"});
}

TEST_CASE("elastic: a cluster that lost two nodes is replaced whole or dropped without taking a "
          "spare") {
  // Both stages of cluster 1 lost, one idle node: cluster 1 is dropped, naming the stage that
  // found none, and the idle node stays free (for cluster 0's lost leaf here).
  auto pool = pool_of({{"node_0", 9'000}, {"node_8", 8'000}});
  auto changes = rt::choose_elastic_changes(plan, {"node_2", "node_3"}, pool);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].kind == rt::ElasticChange::Kind::drop_cluster);
  CHECK(changes[0].lost == "node_3");
  CHECK(changes[0].cluster == 1);
  changes = rt::choose_elastic_changes(plan, {"node_3", "node_2", "node_1"}, pool);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].kind == rt::ElasticChange::Kind::replace);  // cluster 0 first: node_1's
  CHECK(changes[0].lost == "node_1");
  CHECK(changes[0].replacement == "node_8");
  CHECK(changes[1].kind == rt::ElasticChange::Kind::drop_cluster);
  CHECK(changes[1].cluster == 1);
  // Two idle nodes that fit: both stages replaced, each by its own.
  pool = pool_of({{"node_8", 8'000}, {"node_9", 7'000}});
  changes = rt::choose_elastic_changes(plan, {"node_2", "node_3"}, pool);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].lost == "node_2");
  CHECK(changes[0].replacement == "node_8");
  CHECK(changes[1].lost == "node_3");
  CHECK(changes[1].replacement == "node_9");
  // The spare a dropped cluster gave back goes to a later cluster: node_8 fits only the root.
  const std::vector<rt::PlannedNode> three = {{"node_0", 0, 1'000}, {"node_1", 0, 9'000},
                                              {"node_2", 1, 1'000}};
  changes = rt::choose_elastic_changes(three, {"node_0", "node_1", "node_2"},
                                       pool_of({{"node_8", 2'000}}));
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].kind == rt::ElasticChange::Kind::drop_cluster);
  CHECK(changes[0].lost == "node_1");
  CHECK(changes[1].kind == rt::ElasticChange::Kind::replace);
  CHECK(changes[1].replacement == "node_8");
}
