// docs/planner.md#memory: the planner's memory model calibrated on measurements, and a daemon's
// baseline in every stage.
#include <catch2/catch.hpp>

#include <cmath>

#include "libs/planner/cluster_plan.h"

using namespace ravnest;
using namespace ravnest::planner;
using config::NodeConfig;

namespace {

NodeConfig node(int id, double ram_gb) {
  NodeConfig n;
  n.id = id;
  n.name = "node_" + std::to_string(id);
  n.address = "127.0.0.1:" + std::to_string(9000 + id);
  n.ram_gb = ram_gb;
  n.bandwidth_mbps = 1000;
  return n;
}

// Four equal units of 100 MB of parameters (all trainable) and 10 MB of activations each.
ModelProfile four_units() {
  ModelProfile p;
  for (int i = 0; i < 4; ++i) p.units.push_back({"u" + std::to_string(i), 0.1, 100'000'000, 100'000'000, 10'000'000});
  p.boundary_bytes = {1'000'000, 1'000'000, 1'000'000};
  p.cut_allowed = {true, true, true};
  p.batch_size = 8;
  p.input_bytes = 2'000'000;
  return p;
}

}  // namespace

TEST_CASE("the margin is the documented 15 %", "[planner][memory]") {
  CHECK(memory_margin() == Approx(1.15));
}

TEST_CASE("a calibrated stage's model equals what was measured", "[planner][memory]") {
  ModelProfile p = four_units();
  const NodeConfig n = node(0, 100);
  // The formula: 4 x 100 MB (parameters, gradients, two moments) + 10 MB a unit, + 1 MB inputs.
  CHECK(stage_cost(p, 1, 3, n, 0).memory_bytes == Approx((2 * 410e6 + 1e6) * 1.15));
  calibrate_stage_memory(&p, 1, 3, 1'641'000'000);  // twice the units, the inputs as they are
  CHECK(p.units[1].memory_scale == Approx(2.0));
  CHECK(p.units[2].memory_scale == Approx(2.0));
  CHECK(p.units[0].memory_scale == 1.0);  // not in the measured stage
  CHECK(stage_cost(p, 1, 3, n, 0).memory_bytes == Approx(1.641e9 * 1.15));
  // Calibrating again replaces the scale instead of compounding it.
  calibrate_stage_memory(&p, 1, 3, 821'000'000);
  CHECK(p.units[1].memory_scale == Approx(1.0));
  // A measurement below the stage's inputs keeps a positive scale.
  calibrate_stage_memory(&p, 1, 3, 0);
  CHECK(p.units[1].memory_scale == Approx(0.1));
  CHECK_THROWS_AS(calibrate_stage_memory(&p, 3, 5, 1), std::invalid_argument);
}

TEST_CASE("a daemon's baseline is in every stage, and decides what fits", "[planner][memory]") {
  const ModelProfile p = four_units();
  PlanningOptions with_baseline;
  with_baseline.stage_baseline_bytes = 300'000'000;
  const NodeConfig n = node(0, 100);
  CHECK(stage_cost(p, 0, 2, n, 0, with_baseline).memory_bytes ==
        Approx((2 * 410e6 + 2e6 + 300e6) * 1.15));
  // Two units a node need (820 + 1 MB) x 1.15 = 944 MB without a baseline: two nodes of 1 GB
  // hold the model. With 300 MB of baseline each, 1.29 GB a stage: they cannot.
  const std::vector<NodeConfig> pool = {node(0, 1.0), node(1, 1.0)};
  const PoolPlan plain = plan_pool(p, pool, 1);
  REQUIRE(plain.clusters.size() == 1);
  CHECK(plain.clusters[0].stages.size() == 2);
  CHECK_THROWS_AS(plan_pool(p, pool, 1, with_baseline), PoolTooSmall);
  // A node smaller than the baseline holds nothing at all.
  PlanningOptions huge;
  huge.stage_baseline_bytes = 2'000'000'000;
  CHECK_THROWS_AS(plan_pool(p, {node(0, 1.0), node(1, 1.0), node(2, 1.0), node(3, 1.0)}, 1, huge),
                  PoolTooSmall);
}

TEST_CASE("a profile with a memory_scale that is not a positive number is refused",
          "[planner][memory]") {
  ModelProfile p = four_units();
  p.units[2].memory_scale = 0;
  CHECK_THROWS_AS(plan_pool(p, {node(0, 100)}, 1), std::invalid_argument);
  p.units[2].memory_scale = std::nan("");
  CHECK_THROWS_AS(plan_pool(p, {node(0, 100)}, 1), std::invalid_argument);
}
