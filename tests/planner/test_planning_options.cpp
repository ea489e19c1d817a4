// The cost model told how the plan trains (PlanningOptions): codecs scale the bytes sent, a
// synchronous schedule's bubble slows a cluster, the asynchronous stash costs memory.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/planning_options.h"

using ravnest::config::NodeConfig;
using ravnest::config::PipelineSchedule;
using ravnest::config::WireCodec;
using namespace ravnest::planner;

namespace {

NodeConfig node(int id, double ram_gb, double bandwidth_mbps = 100) {
  NodeConfig n;
  n.id = id;
  n.name = "node_" + std::to_string(id);
  n.host = "10.0.0." + std::to_string(id);
  n.port = 8000 + id;
  n.address = n.host + ":" + std::to_string(n.port);
  n.ram_gb = ram_gb;
  n.bandwidth_mbps = bandwidth_mbps;
  return n;
}

// n units of 1 ms forward, each with `parameter_bytes` of trainable parameters.
ModelProfile uniform(size_t n, int64_t parameter_bytes, int64_t boundary_bytes) {
  ModelProfile p;
  for (size_t i = 0; i < n; ++i) {
    Unit u;
    u.label = "unit" + std::to_string(i);
    u.forward_seconds = 1e-3;
    u.parameter_bytes = parameter_bytes;
    u.trainable_bytes = parameter_bytes;
    u.activation_bytes = 1000;
    p.units.push_back(u);
  }
  p.boundary_bytes.assign(n - 1, boundary_bytes);
  p.cut_allowed.assign(n - 1, true);
  p.batch_size = 32;
  p.input_bytes = 1000;
  return p;
}

PlanningOptions with(std::optional<PipelineSchedule> schedule, WireCodec codec = WireCodec::kNone,
                     int micro_batches = 1, int max_in_flight = 0) {
  PlanningOptions o;
  o.schedule = schedule;
  o.activations = o.gradients = codec;
  o.micro_batches = micro_batches;
  o.max_in_flight = max_in_flight;
  return o;
}

}  // namespace

TEST_CASE("codecs scale the bytes a stage sends", "[planner][options]") {
  CHECK(codec_bytes_factor(WireCodec::kNone) == 1.0);
  CHECK(codec_bytes_factor(WireCodec::kFp16) == 0.5);
  CHECK(codec_bytes_factor(WireCodec::kBf16) == 0.5);
  CHECK(codec_bytes_factor(WireCodec::kInt8) == Approx(0.25390625));
  const auto profile = uniform(6, 1000, 1000000);
  const auto n = node(0, 8, 100);  // 12.5 MB/s
  const auto plain = stage_cost(profile, 2, 4, n, 0);
  const auto fp16 = stage_cost(profile, 2, 4, n, 0, with(std::nullopt, WireCodec::kFp16));
  const auto int8 = stage_cost(profile, 2, 4, n, 0, with(std::nullopt, WireCodec::kInt8));
  CHECK(plain.transfer_seconds == Approx(2e6 / 12.5e6));
  CHECK(fp16.transfer_seconds == Approx(plain.transfer_seconds / 2));
  CHECK(int8.transfer_seconds == Approx(plain.transfer_seconds * 0.25390625));
  CHECK(fp16.compute_seconds == plain.compute_seconds);
  CHECK(fp16.memory_bytes == plain.memory_bytes);  // decoded, the tensors are float32 again
  CHECK(fp16.forward_bytes_per_sample == Approx(plain.forward_bytes_per_sample / 2));
  // Different codecs each way.
  PlanningOptions mixed;
  mixed.activations = WireCodec::kFp16;
  mixed.gradients = WireCodec::kInt8;
  CHECK(stage_cost(profile, 2, 4, n, 0, mixed).transfer_seconds ==
        Approx((0.5e6 + 0.25390625e6) / 12.5e6));
  // The partition's bottleneck follows: a transfer-bound pipeline gets about twice as fast.
  const std::vector<NodeConfig> pair = {node(0, 8, 10), node(1, 8, 10)};
  const auto slow = partition(profile, pair, 0);
  const auto fast = partition(profile, pair, 0, with(std::nullopt, WireCodec::kFp16));
  REQUIRE(slow.size() == 2);
  REQUIRE(fast.size() == 2);
  CHECK(fast[0].cost.transfer_seconds == Approx(slow[0].cost.transfer_seconds / 2));
}

TEST_CASE("a synchronous schedule's bubble, none for async", "[planner][options]") {
  CHECK(bubble_factor(with(std::nullopt), 4) == 1.0);  // unmodelled, as before
  CHECK(bubble_factor(with(PipelineSchedule::kGPipe, WireCodec::kNone, 4), 3) == Approx(1.5));
  CHECK(bubble_factor(with(PipelineSchedule::k1F1B, WireCodec::kNone, 1), 3) == Approx(3.0));
  CHECK(bubble_factor(with(PipelineSchedule::kGPipe, WireCodec::kNone, 4), 1) == 1.0);
  CHECK(bubble_factor(with(PipelineSchedule::kAsync, WireCodec::kNone, 4), 3) == 1.0);
  // Nodes that hold half the model each: one 2-stage cluster.
  const auto profile = uniform(8, 100000000, 1000);  // 0.8 GB: 3.68 GB to train
  const std::vector<NodeConfig> pool = {node(0, 2.5), node(1, 2.5)};
  const auto none = plan_pool(profile, pool, 1);
  const auto gpipe = plan_pool(profile, pool, 1, with(PipelineSchedule::kGPipe, WireCodec::kNone, 4));
  const auto async = plan_pool(profile, pool, 1, with(PipelineSchedule::kAsync, WireCodec::kNone, 4, 2));
  REQUIRE(none.clusters.size() == 1);
  REQUIRE(none.clusters[0].stages.size() == 2);
  CHECK(gpipe.samples_per_second == Approx(none.samples_per_second / 1.25));
  CHECK(async.samples_per_second == Approx(none.samples_per_second));
}

TEST_CASE("the asynchronous stash costs memory and can change the plan", "[planner][options]") {
  const auto profile = uniform(8, 100000000, 1000);  // 8 x 0.1 GB of trainable parameters
  const auto n = node(0, 8);
  const auto sync = stage_cost(profile, 0, 4, n, 0, with(PipelineSchedule::kGPipe), 3);
  const auto async = stage_cost(profile, 0, 4, n, 0, with(PipelineSchedule::kAsync), 3);
  CHECK(sync.stash_bytes == 0);
  CHECK(async.stash_bytes == Approx(2 * 4e8 * 1.15));  // max_in_flight = 3 stages: 2 versions
  CHECK(async.memory_bytes == Approx(sync.memory_bytes + async.stash_bytes));
  const auto four = stage_cost(profile, 0, 4, n, 0, with(PipelineSchedule::kAsync, WireCodec::kNone, 1, 4), 3);
  CHECK(four.stash_bytes == Approx(3 * 4e8 * 1.15));

  // Two nodes that hold half the model each train it synchronously; asynchronously each half
  // needs a second version of its parameters, which does not fit: a third node is needed.
  const std::vector<NodeConfig> pair = {node(0, 2.0), node(1, 2.0)};
  CHECK(partition(profile, pair, 0, with(PipelineSchedule::kGPipe)).size() == 2);
  CHECK(partition(profile, pair, 0, with(PipelineSchedule::kAsync)).empty());
  // Four such nodes: synchronously two clusters of two; asynchronously two stages cannot hold
  // their stash, so the plan settles on one cluster of four (each stage keeping 3 versions).
  const std::vector<NodeConfig> four_nodes = {node(0, 2.0), node(1, 2.0), node(2, 2.0), node(3, 2.0)};
  const auto sync_plan = plan_pool(profile, four_nodes, 1, with(PipelineSchedule::kGPipe, WireCodec::kNone, 4));
  REQUIRE(sync_plan.clusters.size() == 2);
  for (const auto& cluster : sync_plan.clusters) {
    CHECK(cluster.stages.size() == 2);
    for (const auto& stage : cluster.stages) CHECK(stage.cost.stash_bytes == 0);
  }
  const auto async_plan = plan_pool(profile, four_nodes, 1, with(PipelineSchedule::kAsync));
  REQUIRE(async_plan.clusters.size() == 1);
  REQUIRE(async_plan.clusters[0].stages.size() == 4);
  for (const auto& stage : async_plan.clusters[0].stages) {
    const double trainable = 1e8 * static_cast<double>(stage.end_unit - stage.first_unit);
    CHECK(stage.cost.stash_bytes == Approx(3 * trainable * 1.15));
    CHECK(stage.cost.memory_bytes <= 2.0e9);
  }
  // With too little memory for any stash, async is refused where sync plans.
  const std::vector<NodeConfig> tight = {node(0, 2.0), node(1, 2.0)};
  CHECK_NOTHROW(plan_pool(profile, tight, 1, with(PipelineSchedule::kGPipe)));
  CHECK_THROWS_AS(plan_pool(profile, tight, 1, with(PipelineSchedule::kAsync)), PoolTooSmall);
}
