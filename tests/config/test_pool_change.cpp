// `ravnest pool add/remove`'s pure parts: editing the pool file's text (JSON and TOML, one-line
// errors) and what a change does to a plan (pool_change.h).
#include <catch2/catch.hpp>

#include <functional>

#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"
#include "libs/config/pool/pool_change.h"
#include "libs/config/pool/pool_edit.h"

using namespace ravnest;
using namespace ravnest::config;

namespace {

const char* kPool = R"({"0": {"IP": "10.0.0.1:8080", "benchmarks": {"ram": 8, "bandwidth": 20}},
 "1": {"IP": "10.0.0.2:8080", "benchmarks": {"ram": 4, "bandwidth": 10}, "extra": "kept"}})";

NodeMetadata stage(int id, int cluster, int position, double need_bytes) {
  NodeMetadata n;
  n.node_id = id;
  n.name = node_name(id);
  n.cluster = cluster;
  n.position = position;
  n.estimates.memory_bytes = need_bytes;
  return n;
}

NodeConfig pool_node(int id, double ram_gb, double bandwidth) {
  NodeConfig n;
  n.id = id;
  n.name = node_name(id);
  n.ram_gb = ram_gb;
  n.bandwidth_mbps = bandwidth;
  return n;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("pool edit: add and remove keep the syntax and the other nodes", "[pool]") {
  CHECK(pool_node_id("7") == 7);
  CHECK(pool_node_id("node_12") == 12);
  CHECK(error_of([] { pool_node_id("gpu-box"); }).find("\"gpu-box\"") != std::string::npos);

  NewPoolNode added{5, "10.0.0.9:8080", 16, 100, 24.0};
  const auto json = add_pool_node(kPool, false, "pool.json", added);
  const auto nodes = parse_node_pool(json, "pool.json", false);
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[2].id == 5);
  CHECK(nodes[2].address == "10.0.0.9:8080");
  CHECK(nodes[2].ram_gb == 16);
  CHECK(nodes[2].gpu_memory_gb == 24);
  CHECK(json.find("\"extra\": \"kept\"") != std::string::npos);
  const auto back = remove_pool_node(json, false, "pool.json", 5);
  CHECK(parse_node_pool(back, "pool.json", false).size() == 2);

  const std::string toml = "[0]\nIP = \"10.0.0.1:8080\"\n[0.benchmarks]\nram = 8\nbandwidth = 20\n";
  const auto toml_added = add_pool_node(toml, true, "pool.toml", {3, "10.0.0.3:9", 2, 5, {}});
  const auto toml_nodes = parse_node_pool(toml_added, "pool.toml", true);
  REQUIRE(toml_nodes.size() == 2);
  CHECK(toml_nodes[1].address == "10.0.0.3:9");
  CHECK(parse_node_pool(remove_pool_node(toml_added, true, "pool.toml", 0), "pool.toml", true)
            .front()
            .id == 3);

  // One line each, naming the file and the node.
  CHECK(error_of([] { add_pool_node(kPool, false, "pool.json", {1, "10.0.0.7:1", 1, 1, {}}); }) ==
        "pool.json: node_1 is already in the pool (at 10.0.0.2:8080)");
  CHECK(error_of([] { add_pool_node(kPool, false, "pool.json", {4, "10.0.0.2:8080", 1, 1, {}}); }) ==
        "pool.json: node_4: the address 10.0.0.2:8080 is node_1's");
  CHECK(error_of([] { add_pool_node(kPool, false, "pool.json", {4, "10.0.0.4:1", -2, 1, {}}); }) ==
        "pool.json: node_4: --ram (GB) must be a positive number, not -2");
  CHECK(error_of([] { add_pool_node(kPool, false, "pool.json", {4, "nohost", 1, 1, {}}); })
            .find("pool.json") == 0);
  CHECK(error_of([] { remove_pool_node(kPool, false, "pool.json", 9); }) ==
        "pool.json: node_9 is not in the pool");
}

TEST_CASE("pool change: a removed node's stage goes to the spare that fits best", "[pool]") {
  // Cluster 0: node 0 (2 GB), node 1 (1 GB); cluster 1: node 2 alone.
  const std::vector<NodeMetadata> plan{stage(0, 0, 0, 2e9), stage(1, 0, 1, 1e9),
                                       stage(2, 1, 0, 3e9)};
  std::vector<NodeConfig> pool{pool_node(0, 4, 10), pool_node(1, 4, 10), pool_node(2, 4, 10),
                               pool_node(3, 1.5, 1000), pool_node(4, 2.5, 50),
                               pool_node(5, 2.5, 100)};
  auto removed = pool;
  removed.erase(removed.begin());  // node 0 leaves
  auto d = decide_removed(plan, removed, 0, 1.0);
  CHECK(d.in_plan);
  CHECK(d.cluster == 0);
  // node 3 has the most bandwidth but too little memory; of 4 and 5 the faster.
  REQUIRE(d.spare);
  CHECK(*d.spare == 5);

  // A spare leaving changes nothing.
  CHECK_FALSE(decide_removed(plan, pool, 4, 1.0).in_plan);

  // node 2 needs 3 GB: no spare has it.
  d = decide_removed(plan, pool, 2, 1.0);
  CHECK_FALSE(d.spare);
  CHECK(d.largest_spare_bytes == 2.5e9);

  // On a GPU plan a spare offers the smaller of its RAM and its GPU's memory: node 5's 1 GB card
  // leaves node 4.
  auto gpu_plan = plan;
  for (auto& n : gpu_plan) n.estimates.node_gpu_memory_bytes = 8000000000;
  removed[3].gpu_memory_gb = 8;  // node 4
  removed[4].gpu_memory_gb = 1;  // node 5
  d = decide_removed(gpu_plan, removed, 0, 1.0);
  REQUIRE(d.spare);
  CHECK(*d.spare == 4);

  // The measured peak x the margin wins over the formula.
  auto measured = stage(7, 0, 0, 9e9);
  measured.estimates.peak_memory_bytes = 1000;
  CHECK(stage_need_bytes(measured, 1.5) == 1500);
}

TEST_CASE("pool change: added spares that could hold another cluster", "[pool]") {
  const std::vector<NodeMetadata> plan{stage(0, 0, 0, 2e9), stage(1, 0, 1, 1e9)};
  std::vector<NodeConfig> pool{pool_node(0, 4, 10), pool_node(1, 4, 10), pool_node(3, 1.5, 10)};
  CHECK_FALSE(decide_added(plan, pool, 1.0).like_cluster);  // one spare for two stages
  pool.push_back(pool_node(4, 1.2, 10));
  CHECK_FALSE(decide_added(plan, pool, 1.0).like_cluster);  // neither holds 2 GB
  pool.push_back(pool_node(6, 8, 10));
  const auto d = decide_added(plan, pool, 1.0);
  REQUIRE(d.like_cluster);
  CHECK(*d.like_cluster == 0);
  // The 2 GB stage takes the only spare that holds it (node 6), the 1 GB one the smallest that
  // does (node 4), in pipeline order.
  CHECK(d.could_form == std::vector<int>{6, 4});
}

TEST_CASE("pool change: a plan's nodes the pool now places elsewhere", "[pool]") {
  auto placed = [](int id, const std::string& address) {
    NodeMetadata n = stage(id, 0, id, 1e6);
    n.address = address;
    return n;
  };
  auto listed = [](int id, const std::string& address) {
    NodeConfig n = pool_node(id, 8, 100);
    n.address = address;
    return n;
  };
  const std::vector<NodeMetadata> plan = {placed(1, "127.0.0.1:40303"),
                                          placed(0, "127.0.0.1:56871")};
  CHECK(moved_nodes(plan, {listed(0, "127.0.0.1:56871"), listed(1, "127.0.0.1:40303"),
                           listed(2, "127.0.0.1:9")})
            .empty());
  CHECK(moved_nodes(plan, {listed(1, "127.0.0.1:40303")}).empty());  // node_0 gone: not moved
  const auto moved = moved_nodes(plan, {listed(0, "127.0.0.1:35933"), listed(1, "127.0.0.1:1")});
  REQUIRE(moved.size() == 2);
  CHECK(moved[0] == "node_0 at 127.0.0.1:56871, the pool now 127.0.0.1:35933");
  CHECK(moved[1] == "node_1 at 127.0.0.1:40303, the pool now 127.0.0.1:1");
}
