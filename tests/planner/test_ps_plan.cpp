// plan_parameter_servers(): who serves, which shard, who evaluates, who trains, and the estimate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/ps_plan.h"

using ravnest::config::NodeConfig;
using namespace ravnest::planner;

namespace {

NodeConfig node(int id, double ram_gb, double bandwidth_mbps, double gflops = 0) {
  NodeConfig n;
  n.id = id;
  n.name = "node_" + std::to_string(id);
  n.host = "10.0.0." + std::to_string(id);
  n.port = 8000 + id;
  n.address = n.host + ":" + std::to_string(n.port);
  n.ram_gb = ram_gb;
  n.bandwidth_mbps = bandwidth_mbps;
  n.gflops = gflops;
  return n;
}

// A model of `units` units of 1 ms forward each; its state is the given tensors.
ModelProfile profile_of(const std::vector<StateTensor>& state, size_t units = 4) {
  ModelProfile p;
  int64_t total = 0;
  for (const auto& t : state) total += t.bytes;
  for (size_t i = 0; i < units; ++i) {
    Unit u;
    u.label = "unit" + std::to_string(i);
    u.forward_seconds = 1e-3;
    u.parameter_bytes = total / static_cast<int64_t>(units);
    u.trainable_bytes = u.parameter_bytes;
    u.activation_bytes = 1000;
    p.units.push_back(u);
  }
  p.boundary_bytes.assign(units - 1, 1000);
  p.cut_allowed.assign(units - 1, true);
  p.batch_size = 32;
  p.input_bytes = 1000;
  return p;
}

std::vector<StateTensor> tensors(const std::vector<int64_t>& bytes) {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < bytes.size(); ++i) out.push_back({"t" + std::to_string(i), bytes[i]});
  return out;
}

}  // namespace

TEST_CASE("servers are the nodes with the most bandwidth", "[ps_plan]") {
  const auto state = tensors({4000, 3000, 2000, 1000});
  const std::vector<NodeConfig> pool = {node(0, 8, 100), node(1, 8, 1000), node(2, 8, 100),
                                        node(3, 8, 500), node(4, 8, 100)};
  const auto plan = plan_parameter_servers(profile_of(state), state, pool, {2, false});
  REQUIRE(plan.servers.size() == 2);
  CHECK(plan.servers[0].node_id == 1);
  CHECK(plan.servers[1].node_id == 3);
  std::vector<int> workers;
  for (const auto& w : plan.workers) workers.push_back(w.node_id);
  CHECK(workers == std::vector<int>{0, 2, 4});
  CHECK_FALSE(plan.evaluator);
  CHECK(plan.unplaced_nodes.empty());
}

TEST_CASE("every tensor is on exactly one server, in model order", "[ps_plan]") {
  std::mt19937 rng(7);
  std::vector<int64_t> bytes;
  for (int i = 0; i < 40; ++i) bytes.push_back(4 * (1 + static_cast<int64_t>(rng() % 5000)));
  const auto state = tensors(bytes);
  std::vector<NodeConfig> pool;
  for (int i = 0; i < 7; ++i) pool.push_back(node(i, 8, 100));
  for (int k : {1, 2, 3, 4}) {
    INFO("servers " << k);
    const auto plan = plan_parameter_servers(profile_of(state), state, pool, {k, true});
    REQUIRE(plan.servers.size() == static_cast<size_t>(k));
    std::map<std::string, int> seen;
    int64_t total = 0, largest = 0;
    for (const auto& s : plan.servers) {
      size_t last = 0;
      int64_t shard = 0;
      for (const auto& name : s.tensors) {
        ++seen[name];
        const size_t index = std::stoul(name.substr(1));
        CHECK(index >= last);
        last = index;
        shard += bytes[index];
      }
      CHECK(shard == s.shard_bytes);
      total += shard;
      largest = std::max(largest, shard);
    }
    CHECK(seen.size() == state.size());
    for (const auto& [name, count] : seen) CHECK(count == 1);
    // Alike links: each server carries about 1/K of the bytes (within the largest tensor).
    const int64_t biggest_tensor = *std::max_element(bytes.begin(), bytes.end());
    CHECK(largest <= total / k + biggest_tensor);
    CHECK(plan.workers.size() == static_cast<size_t>(7 - k - 1));
  }
}

TEST_CASE("a faster server link takes a proportionally larger shard", "[ps_plan]") {
  std::vector<int64_t> bytes(300, 400);
  const auto state = tensors(bytes);
  const std::vector<NodeConfig> pool = {node(0, 8, 300), node(1, 8, 100), node(2, 8, 10),
                                        node(3, 8, 10)};
  const auto plan = plan_parameter_servers(profile_of(state), state, pool, {2, false});
  REQUIRE(plan.servers.size() == 2);
  CHECK(plan.servers[0].node_id == 0);
  CHECK(plan.servers[1].node_id == 1);
  const double ratio = static_cast<double>(plan.servers[0].shard_bytes) /
                       static_cast<double>(plan.servers[1].shard_bytes);
  CHECK(ratio == Approx(3.0).epsilon(0.02));
  CHECK(plan.servers[0].exchange_seconds == Approx(plan.servers[1].exchange_seconds).epsilon(0.02));
}

TEST_CASE("the step estimate: slowest compute, then the slowest exchange", "[ps_plan]") {
  const auto state = tensors({1000000, 1000000});  // 2 MB
  // 3 workers at 100 Mbit/s (12.5 MB/s), 1 server at 1000 Mbit/s.
  const std::vector<NodeConfig> pool = {node(0, 8, 1000), node(1, 8, 100), node(2, 8, 100),
                                        node(3, 8, 100)};
  const auto profile = profile_of(state);
  const auto plan = plan_parameter_servers(profile, state, pool, {1, false});
  REQUIRE(plan.workers.size() == 3);
  const double compute = 3 * 4e-3;  // forward + backward of 4 units of 1 ms
  const double worker_exchange = 2 * 2e6 / 12.5e6;
  const double server_exchange = 2 * 3 * 2e6 / 125e6;
  CHECK(plan.workers[0].exchange_seconds == Approx(worker_exchange));
  CHECK(plan.servers[0].exchange_seconds == Approx(server_exchange));
  CHECK(plan.step_seconds == Approx(compute + std::max(worker_exchange, server_exchange)));
  CHECK(plan.samples_per_second == Approx(3 * 32 / plan.step_seconds));
  // A slow server link becomes the bottleneck.
  const std::vector<NodeConfig> slow = {node(0, 8, 10), node(1, 8, 5), node(2, 8, 5),
                                        node(3, 8, 5)};
  const auto slow_plan = plan_parameter_servers(profile, state, slow, {1, false});
  CHECK(slow_plan.servers[0].node_id == 0);
  CHECK(slow_plan.step_seconds == Approx(compute + 2 * 3 * 2e6 / 1.25e6));
}

TEST_CASE("the evaluator is the weakest node left, preferring one that cannot train", "[ps_plan]") {
  const auto state = tensors({400000000});  // 0.4 GB: training needs about 1.84 GB
  const auto profile = profile_of(state);
  std::vector<NodeConfig> pool = {node(0, 8, 1000, 10), node(1, 8, 100, 10), node(2, 8, 100, 2),
                                  node(3, 8, 100, 5)};
  auto plan = plan_parameter_servers(profile, state, pool, {1, true});
  REQUIRE(plan.evaluator);
  CHECK(*plan.evaluator == 2);
  // A node with 1 GB cannot train but can score: it becomes the evaluator.
  pool.push_back(node(4, 1, 100, 20));
  plan = plan_parameter_servers(profile, state, pool, {1, true});
  CHECK(*plan.evaluator == 4);
  CHECK(plan.unplaced_nodes.empty());
  // Without an evaluator it cannot be placed.
  plan = plan_parameter_servers(profile, state, pool, {1, false});
  CHECK(plan.unplaced_nodes == std::vector<int>{4});
  CHECK(plan.workers.size() == 3);
}

TEST_CASE("parameter-server plans refuse what cannot work", "[ps_plan]") {
  const auto state = tensors({1000, 1000});
  const auto profile = profile_of(state);
  const std::vector<NodeConfig> pool = {node(0, 8, 100), node(1, 8, 100), node(2, 8, 100)};
  CHECK_THROWS_AS(plan_parameter_servers(profile, state, pool, {0, false}), std::invalid_argument);
  CHECK_THROWS_WITH(plan_parameter_servers(profile, state, pool, {3, false}),
                    Catch::Contains("need 4 nodes; the pool has 3"));
  CHECK_THROWS_WITH(plan_parameter_servers(profile, state, pool, {2, true}),
                    Catch::Contains("an evaluator"));
  CHECK_NOTHROW(plan_parameter_servers(profile, state, pool, {2, false}));
  CHECK_THROWS_AS(plan_parameter_servers(profile, {}, pool, {1, false}), std::invalid_argument);
  // Nobody can train a model this large.
  const auto big = tensors({4000000000});
  const std::vector<NodeConfig> small = {node(0, 40, 100), node(1, 8, 100), node(2, 8, 100)};
  CHECK_THROWS_AS(plan_parameter_servers(profile_of(big), big, small, {1, false}), PoolTooSmall);
}
