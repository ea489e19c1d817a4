// Planning on measured memory, the decision without the measuring (docs/planner.md#memory):
// which stages to measure, how the cost model learns from what was measured, when a plan fits
// and when the pool is refused. libs/graph/memory_planning.h measures (it cuts the stages and
// trains each in a probe process); everything here is plain data, so it is tested with
// measurements made up.
//
//  1. plan the pool with the formula (or, when the formula already finds the pool too small, as
//     if memory were no object) and measure every stage of that plan;
//  2. calibrate, plan the real pool again, measure the stages not measured yet; until every
//     stage of a plan was measured and fits its node (peak x memory_margin() <= RAM), at most
//     kMaxMemoryRounds plans;
//  3. otherwise throw PoolTooSmall naming a node, its stage's need and its RAM.
//
// The model learns from every measurement at once, and never less than any of them says: each
// unit's memory_scale is the largest scale any measured stage holding it gave. So a stage once
// measured is never modelled below its measurement again, a plan never puts it back on a node
// it does not fit, and a round that does not fit always measured something new.
// Runs on the caller's thread; blocks while `measure` does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/model_profile.h"
#include "libs/planner/planning_options.h"

namespace ravnest::planner {

inline constexpr int kMaxMemoryRounds = 5;

// What one stage's measurement depends on besides its units: the schedule's load on it (the
// forwards it keeps alive, the older versions it stashes), its place (the root takes data, the
// leaf computes the loss) and whether a ring averages it with other clusters.
struct StageToMeasure {
  size_t cluster = 0;  // index into the plan's clusters
  size_t stage = 0;    // index into that cluster's stages
  size_t first_unit = 0;
  size_t end_unit = 0;
  int in_flight = 1;
  int64_t stash_versions = 0;
  bool root = false;
  bool leaf = false;
  bool averaged = false;
  bool same_probe(const StageToMeasure& other) const;
};

struct StageMeasurement {
  int64_t peak_bytes = 0;      // the resident peak training the stage, the idle process included
  int64_t baseline_bytes = 0;  // the idle process
  int64_t stage_bytes() const { return peak_bytes > baseline_bytes ? peak_bytes - baseline_bytes : 0; }
};

// Stage `stage` of cluster `cluster` of `plan`, as a probe of it is asked for.
StageToMeasure stage_to_measure(const PlanningOptions& planning, const PoolPlan& plan,
                                size_t cluster, size_t stage);

// Forwards a daemon keeps alive at once (libs/training/schedule.h): GPipe all of a batch, 1F1B
// at most the stages, async max_in_flight (0: the stages). Without a schedule: GPipe.
int forwards_in_flight(const PlanningOptions& planning, size_t stages);

// Measures `stages` of `plan` (cut for `nodes` with `planning`), returning one measurement each,
// in order. Throws what its probes throw.
using MeasureStages = std::function<std::vector<StageMeasurement>(
    const PoolPlan& plan, const std::vector<config::NodeConfig>& nodes,
    const PlanningOptions& planning, const std::vector<StageToMeasure>& stages)>;

struct MeasuredPoolPlan {
  PoolPlan plan;
  PlanningOptions planning;  // stage_baseline_bytes: the largest baseline measured
  std::vector<std::vector<StageMeasurement>> measured;  // per cluster of `plan`, per stage
  int measurements = 0;                                  // stages measured in all
};

// One stage measured, as the cost model learns from it.
struct MeasuredUnits {
  size_t first_unit = 0;
  size_t end_unit = 0;
  int64_t stash_versions = 0;
  int64_t stage_bytes = 0;  // the peak above the idle process
};

// Sets each unit's memory_scale to the largest calibrate_stage_memory() would give it for any
// of `measured` holding it; units no measurement holds keep theirs. Afterwards the model of every
// measured stage is at least its stage_bytes (to a byte a unit of rounding).
// Precondition: valid ranges of `profile`.
void calibrate_on_measurements(ModelProfile* profile, const std::vector<MeasuredUnits>& measured);

// Steps 1-3 above. `formula`: the profile with the formula's memory (its scales the starting
// point); `log` gets a line for each round that does not fit. Throws PoolTooSmall with one line.
MeasuredPoolPlan plan_on_measurements(const ModelProfile& formula,
                                      const std::vector<config::NodeConfig>& pool, uint64_t seed,
                                      const PlanningOptions& planning,
                                      const MeasureStages& measure,
                                      const std::function<void(const std::string&)>& log);

}  // namespace ravnest::planner
