// Which clusters dropped on a lost connection come back with their own nodes
// (libs/requester/link_rejoin.h), without processes: a node's answer that keeps it out of a job,
// and the clusters taken back or given up given their nodes' answers and the rejoins made.
#include <catch2/catch.hpp>

#include "libs/requester/link_rejoin.h"

using namespace ravnest;

namespace {

config::NodeMetadata node_1() {
  config::NodeMetadata meta;
  meta.name = "node_1";
  meta.address = "127.0.0.1:8081";
  meta.stage_sha256 = std::string(64, 'a');
  return meta;
}

wire::NodeStatusData idle_with_stage() {
  wire::NodeStatusData s;
  s.node = "node_1";
  s.has_stage = true;
  s.stage_sha256 = std::string(64, 'a');
  s.state = wire::NodeState::kFailed;  // the dropped job's failure: it runs nothing
  s.job_id = 7;
  return s;
}

}  // namespace

TEST_CASE("link rejoin: a node that answers as itself, holds the plan's stage and trains no job "
          "fits; each other answer is one line naming it",
          "[elastic]") {
  const auto meta = node_1();
  CHECK(requester::unfit_for_job(meta, idle_with_stage()).empty());
  auto other = idle_with_stage();
  other.node = "node_4";
  CHECK(requester::unfit_for_job(meta, other) ==
        "node_1 (127.0.0.1:8081): the daemon there serves node_4; start `ravnestd --node node_1` "
        "there");
  auto bare = idle_with_stage();
  bare.has_stage = false;
  CHECK(requester::unfit_for_job(meta, bare) ==
        "node_1 (127.0.0.1:8081): no stage stored; run `ravnest push`");
  auto damaged = idle_with_stage();
  damaged.stage_problem = "stage.pt: checksum differs";
  CHECK(requester::unfit_for_job(meta, damaged) ==
        "node_1 (127.0.0.1:8081): stage.pt: checksum differs; run `ravnest push`");
  auto older = idle_with_stage();
  older.stage_sha256 = std::string(64, 'b');
  CHECK(requester::unfit_for_job(meta, older).find("holds stage bbbbbbbbbbbb, not the plan's "
                                                   "aaaaaaaaaaaa") != std::string::npos);
  auto training = idle_with_stage();
  training.state = wire::NodeState::kTraining;
  CHECK(requester::unfit_for_job(meta, training) ==
        "node_1 (127.0.0.1:8081): busy: job 7 is running; wait for it, or stop it with "
        "`ravnest stop`");
}

TEST_CASE("link rejoin: clusters whose nodes all answer come back while they have rejoins left; "
          "one that used them up is given up, whatever its nodes say",
          "[elastic]") {
  // Cluster 1 answers, 2 does not (yet), 3 answers but came back 3 times already.
  const std::map<int, std::string> why_not = {
      {1, ""}, {2, "node_2 (127.0.0.1:8082): status: Connection refused"}, {3, ""}};
  const auto choice = requester::choose_link_rejoins(why_not, {{1, 2}, {3, 3}}, 3);
  CHECK(choice.back == std::vector<int>{1});
  CHECK(choice.given_up == std::vector<int>{3});
  // A silent cluster without rejoins left is given up too; with none allowed, nothing comes back.
  CHECK(requester::choose_link_rejoins(why_not, {{2, 3}}, 3).given_up == std::vector<int>{2});
  const auto none = requester::choose_link_rejoins(why_not, {}, 0);
  CHECK(none.back.empty());
  CHECK(none.given_up == std::vector<int>{1, 2, 3});
  CHECK(requester::choose_link_rejoins({}, {}, 3).back.empty());
}

TEST_CASE("link rejoin: a dropped node is asked where the tracker's live pool has it when that "
          "differs from the plan",
          "[elastic]") {
  const auto meta = node_1();
  CHECK(requester::address_to_ask(meta, {}) == "127.0.0.1:8081");
  CHECK(requester::address_to_ask(meta, {{"node_2", "127.0.0.4:8082"}}) == "127.0.0.1:8081");
  CHECK(requester::address_to_ask(meta, {{"node_1", "127.0.0.1:8081"}}) == "127.0.0.1:8081");
  CHECK(requester::address_to_ask(meta, {{"node_1", ""}}) == "127.0.0.1:8081");
  // Its relay changed (--relay auto): the pool has the new relay's host, its port.
  CHECK(requester::address_to_ask(meta, {{"node_1", "127.0.0.4:8081"}}) == "127.0.0.4:8081");
}

namespace {

// Two clusters of two stages, one ring per stage: node_0, node_1 (cluster 0), node_2, node_3.
std::vector<config::NodeMetadata> two_by_two() {
  std::vector<config::NodeMetadata> nodes;
  for (int id = 0; id < 4; ++id) {
    config::NodeMetadata m;
    m.node_id = id;
    m.name = config::node_name(id);
    m.cluster = id / 2;
    m.position = id % 2;
    m.address = "127.0.0.1:" + std::to_string(8080 + id);
    const int first = m.cluster * 2;
    m.pipeline = {first, first + 1};
    m.addresses = {{first, "127.0.0.1:" + std::to_string(8080 + first)},
                   {first + 1, "127.0.0.1:" + std::to_string(8081 + first)}};
    const int peer = (id + 2) % 4;
    config::RingMembership ring;
    ring.id = m.position;
    ring.size = 2;
    ring.position = m.cluster;
    ring.next = {peer, peer / 2, "127.0.0.1:" + std::to_string(8080 + peer)};
    ring.prev = ring.next;
    m.rings = {ring};
    m.tls_fingerprints = {{"127.0.0.1:8081", std::string(64, 'f')}};
    nodes.push_back(m);
  }
  return nodes;
}

}  // namespace

TEST_CASE("link rejoin: a node that moved is at its new address everywhere the plan names it",
          "[elastic]") {
  auto nodes = two_by_two();
  const auto changed = requester::move_node(nodes, 1, "127.0.0.4:8081");
  // node_1 itself, its pipeline neighbour node_0, its ring peer node_3; node_2 names it nowhere
  // but in the pin every node carries.
  CHECK(changed == std::vector<int>{0, 1, 2, 3});
  CHECK(nodes[1].address == "127.0.0.4:8081");
  CHECK(nodes[1].addresses.at(1) == "127.0.0.4:8081");
  CHECK(nodes[0].addresses.at(1) == "127.0.0.4:8081");
  CHECK(nodes[0].addresses.at(0) == "127.0.0.1:8080");
  CHECK(nodes[3].rings[0].next.address == "127.0.0.4:8081");
  CHECK(nodes[3].rings[0].prev.address == "127.0.0.4:8081");
  CHECK(nodes[3].rings[0].next.node == 1);
  CHECK(nodes[2].rings[0].next.address == "127.0.0.1:8080");
  CHECK(nodes[2].addresses.at(3) == "127.0.0.1:8083");
  for (const auto& m : nodes) {
    CHECK(m.tls_fingerprints.count("127.0.0.1:8081") == 0);
    CHECK(m.tls_fingerprints.at("127.0.0.4:8081") == std::string(64, 'f'));
  }
  // Moved again to where it is: nothing changes.
  CHECK(requester::move_node(nodes, 1, "127.0.0.4:8081").empty());
  // Without pins only the nodes that name it change.
  auto bare = two_by_two();
  for (auto& m : bare) m.tls_fingerprints.clear();
  CHECK(requester::move_node(bare, 1, "127.0.0.4:8081") == std::vector<int>{0, 1, 3});
  CHECK_THROWS_WITH(requester::move_node(bare, 7, "127.0.0.4:9000"),
                    "node_7 is not in the plan");
  CHECK_THROWS_WITH(requester::move_node(bare, 1, "127.0.0.1:8082"),
                    "node_1 cannot move to 127.0.0.1:8082: it is node_2's address in the plan");
}
