// admit_clusters: which clusters a running job takes in when plan.json changes (a dropped
// cluster replaced, a cluster joined), from which cluster each starts, and when it must wait.
#include <catch2/catch.hpp>

#include "libs/membership/cluster_admission.h"

using namespace ravnest::config;
using namespace ravnest::membership;

namespace {

// `clusters` clusters of `stages` nodes each, node ids cluster * 10 + position, stage bytes
// "sha-<position>" unless `sha` says otherwise.
std::vector<NodeMetadata> plan_of(int clusters, int stages, const std::string& sha = "sha-") {
  std::vector<NodeMetadata> nodes;
  for (int c = 0; c < clusters; ++c) {
    for (int p = 0; p < stages; ++p) {
      NodeMetadata m;
      m.node_id = c * 10 + p;
      m.name = "node_" + std::to_string(m.node_id);
      m.cluster = c;
      m.position = p;
      m.cluster_size = stages;
      m.cluster_count = clusters;
      m.stage_sha256 = sha + std::to_string(p);
      nodes.push_back(m);
    }
  }
  return nodes;
}

}  // namespace

TEST_CASE("cluster admission: nothing changed, nothing to take in") {
  const auto plan = plan_of(3, 2);
  const auto a = admit_clusters(plan, plan, {});
  CHECK(a.empty());
  CHECK(a.wait.empty());
  // A dropped cluster whose nodes are the same (not replaced yet) stays out.
  const auto b = admit_clusters(plan, plan, {2});
  CHECK(b.empty());
  CHECK(b.wait.empty());
}

TEST_CASE("cluster admission: a joined cluster starts from a training cluster of its cut") {
  const auto running = plan_of(2, 2);
  auto now = plan_of(3, 2);
  auto a = admit_clusters(running, now, {});
  REQUIRE(a.wait.empty());
  CHECK(a.joining == std::vector<int>{2});
  CHECK(a.rejoining.empty());
  CHECK(a.source.at(2) == 0);
  // Cluster 0 dropped and not replaced: the joined one comes in from cluster 1, cluster 0
  // stays dropped.
  auto b = admit_clusters(running, now, {0});
  REQUIRE(b.wait.empty());
  CHECK(b.joining == std::vector<int>{2});
  CHECK(b.source.at(2) == 1);
  CHECK(b.staying_dropped == std::vector<int>{0});
}

TEST_CASE("cluster admission: the source is cut alike where one is, re-cut from the first "
          "training cluster otherwise") {
  // Cluster 0 is cut otherwise than cluster 1; the newcomer is cut like cluster 1.
  auto running = plan_of(2, 2);
  running[0].stage_sha256 = "other-0";
  auto now = running;
  for (auto m : plan_of(3, 2)) {
    if (m.cluster == 2) now.push_back(m);
  }
  auto a = admit_clusters(running, now, {});
  REQUIRE(a.wait.empty());
  CHECK(a.source.at(2) == 1);
  CHECK(a.recut.empty());
  // Cut like no cluster: the first training cluster's checkpoints, re-cut.
  for (auto& m : now) {
    if (m.cluster == 2) m.stage_sha256 = "new";
  }
  auto b = admit_clusters(running, now, {});
  REQUIRE(b.wait.empty());
  CHECK(b.source.at(2) == 0);
  CHECK(b.recut == std::set<int>{2});
  // A dropped cluster replaced, cut like no training one: re-cut from a cluster that trains.
  auto dropped_now = running;
  dropped_now[1].node_id = 99;  // cluster 0's second stage replaced
  auto c = admit_clusters(running, dropped_now, {0});
  REQUIRE(c.wait.empty());
  CHECK(c.rejoining == std::vector<int>{0});
  CHECK(c.source.at(0) == 1);
  CHECK(c.recut == std::set<int>{0});
  // A different number of stages is re-cut too.
  auto three = plan_of(2, 3);
  auto grown = three;
  for (auto m : plan_of(3, 2)) {
    if (m.cluster == 2) grown.push_back(m);
  }
  auto d = admit_clusters(three, grown, {});
  REQUIRE(d.wait.empty());
  CHECK(d.source.at(2) == 0);
  CHECK(d.recut == std::set<int>{2});
  // Nothing trains: nothing to start from, said.
  auto e = admit_clusters(running, dropped_now, {0, 1});
  CHECK(e.wait == "no cluster trains: nothing to start cluster 0 from");
}

TEST_CASE("cluster admission: a replaced dropped cluster rejoins from a live one") {
  const auto running = plan_of(3, 1);
  auto now = running;
  now[2].node_id = 99;  // node_2 replaced by a spare
  auto a = admit_clusters(running, now, {2});
  REQUIRE(a.wait.empty());
  CHECK(a.rejoining == std::vector<int>{2});
  CHECK(a.source.at(2) == 0);
  // The source is never a dropped cluster: with 0 and 2 dropped and both replaced, 1 is it.
  now[0].node_id = 98;
  auto b = admit_clusters(running, now, {0, 2});
  REQUIRE(b.wait.empty());
  CHECK(b.rejoining == std::vector<int>{0, 2});
  CHECK(b.source.at(0) == 1);
  CHECK(b.source.at(2) == 1);
  CHECK(b.staying_dropped.empty());
  // Only one of two dropped clusters replaced: it rejoins, the other stays dropped.
  now[0].node_id = 0;
  auto c = admit_clusters(running, now, {0, 2});
  REQUIRE(c.wait.empty());
  CHECK(c.rejoining == std::vector<int>{2});
  CHECK(c.source.at(2) == 1);
  CHECK(c.staying_dropped == std::vector<int>{0});
  // A training cluster whose nodes changed is nothing to take in (replace refuses that).
  auto d = admit_clusters(running, now, {});
  CHECK(d.empty());
}

TEST_CASE("cluster admission: plan.json without a running cluster is no change a job takes") {
  const auto running = plan_of(3, 1);
  const auto now = plan_of(2, 1);
  const auto a = admit_clusters(running, now, {});
  CHECK(a.wait == "plan.json no longer names cluster 2 of the running job; a running job takes "
                  "in clusters, it loses none");
  CHECK(a.empty());
}

TEST_CASE("cluster admission: a cluster dropped on a lost connection rejoins with its own nodes") {
  const auto plan = plan_of(3, 2);
  // plan.json unchanged: cluster 1 comes back as it is, from a cluster still training.
  auto a = admit_clusters(plan, plan, {1, 2}, {1});
  REQUIRE(a.wait.empty());
  CHECK(a.rejoining == std::vector<int>{1});
  CHECK(a.joining.empty());
  CHECK(a.source.at(1) == 0);
  CHECK(a.staying_dropped == std::vector<int>{2});
  // Only a dropped cluster comes back: one still training is nothing to take in.
  CHECK(admit_clusters(plan, plan, {2}, {1}).empty());
  // A cluster whose stages no training cluster has comes back re-cut, as a replaced one does.
  auto other = plan;
  for (auto& m : other) {
    if (m.cluster == 2) m.stage_sha256 = "other";
  }
  auto b = admit_clusters(other, other, {0, 2}, {2});
  REQUIRE(b.wait.empty());
  CHECK(b.source.at(2) == 1);
  CHECK(b.recut == std::set<int>{2});
}
