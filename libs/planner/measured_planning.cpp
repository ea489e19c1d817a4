// plan_on_measurements(): planning with measured memory, the measuring left to the caller.
#include "libs/planner/measured_planning.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "libs/base/byte_size.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner {
namespace {

using config::NodeConfig;

// Bytes as every report of the project writes them; the pool's RAM is a double of bytes.
std::string format_bytes(double bytes) {
  return base::format_bytes(bytes > 0 ? static_cast<uint64_t>(bytes) : 0);
}

std::string margin_text() {
  return std::to_string(static_cast<int>((memory_margin() - 1) * 100 + 0.5)) + " % margin";
}

}  // namespace

StageToMeasure stage_to_measure(const PlanningOptions& planning, const PoolPlan& plan, size_t c,
                                size_t s) {
  const auto& cluster = plan.clusters[c];
  const size_t stages = cluster.stages.size();
  StageToMeasure probe;
  probe.cluster = c;
  probe.stage = s;
  probe.first_unit = cluster.stages[s].first_unit;
  probe.end_unit = cluster.stages[s].end_unit;
  probe.in_flight = forwards_in_flight(planning, stages);
  probe.stash_versions = stashed_versions(planning, stages);
  probe.root = s == 0;
  probe.leaf = s + 1 == stages;
  // Stages of a plan of several clusters are averaged over rings (so are stages sharing a
  // parameter inside a cluster, whose rings hold only those parameters: not modelled).
  probe.averaged = plan.clusters.size() > 1;
  return probe;
}

bool StageToMeasure::same_probe(const StageToMeasure& o) const {
  return first_unit == o.first_unit && end_unit == o.end_unit && in_flight == o.in_flight &&
         stash_versions == o.stash_versions && root == o.root && leaf == o.leaf &&
         averaged == o.averaged;
}

int forwards_in_flight(const PlanningOptions& p, size_t stages) {
  const int m = std::max(p.micro_batches, 1);
  if (!p.schedule || *p.schedule == config::PipelineSchedule::kGPipe) return m;
  const int s = static_cast<int>(stages);
  if (*p.schedule == config::PipelineSchedule::k1F1B) return std::min(m, s);
  return p.max_in_flight > 0 ? p.max_in_flight : s;
}

void calibrate_on_measurements(ModelProfile* profile, const std::vector<MeasuredUnits>& measured) {
  std::vector<double> scale(profile->units.size(), 0.0);
  for (const auto& m : measured) {
    if (m.first_unit >= m.end_unit || m.end_unit > profile->units.size()) {
      throw std::invalid_argument("calibrate_on_measurements: bad unit range [" +
                                  std::to_string(m.first_unit) + ", " +
                                  std::to_string(m.end_unit) + ")");
    }
    const double s = detail::measured_memory_scale(*profile, m.first_unit, m.end_unit,
                                                   m.stage_bytes, m.stash_versions);
    for (size_t i = m.first_unit; i < m.end_unit; ++i) scale[i] = std::max(scale[i], s);
  }
  for (size_t i = 0; i < scale.size(); ++i) {
    if (scale[i] > 0) profile->units[i].memory_scale = scale[i];
  }
}

MeasuredPoolPlan plan_on_measurements(const ModelProfile& formula,
                                      const std::vector<NodeConfig>& pool, uint64_t seed,
                                      const PlanningOptions& planning,
                                      const MeasureStages& measure,
                                      const std::function<void(const std::string&)>& log) {
  MeasuredPoolPlan out;
  out.planning = planning;
  ModelProfile profile = formula;
  std::vector<std::pair<StageToMeasure, StageMeasurement>> known;
  auto find = [&](const StageToMeasure& probe) -> const StageMeasurement* {
    for (const auto& [k, m] : known) {
      if (k.same_probe(probe)) return &m;
    }
    return nullptr;
  };

  // Measures the stages of `plan` not measured yet, then calibrates on everything measured.
  auto measure_plan = [&](const PoolPlan& plan, const std::vector<NodeConfig>& nodes) {
    std::vector<StageToMeasure> wanted;
    for (size_t c = 0; c < plan.clusters.size(); ++c) {
      for (size_t s = 0; s < plan.clusters[c].stages.size(); ++s) {
        const StageToMeasure probe = stage_to_measure(out.planning, plan, c, s);
        const bool listed = std::any_of(wanted.begin(), wanted.end(),
                                        [&](const auto& w) { return w.same_probe(probe); });
        if (!listed && !find(probe)) wanted.push_back(probe);
      }
    }
    if (!wanted.empty()) {
      const auto got = measure(plan, nodes, out.planning, wanted);
      if (got.size() != wanted.size()) {
        throw std::logic_error("plan_on_measurements: " + std::to_string(wanted.size()) +
                               " stage(s) to measure, " + std::to_string(got.size()) +
                               " measurement(s)");
      }
      for (size_t i = 0; i < got.size(); ++i) known.emplace_back(wanted[i], got[i]);
      out.measurements += static_cast<int>(got.size());
    }
    std::vector<MeasuredUnits> units;
    for (const auto& [k, m] : known) {
      units.push_back({k.first_unit, k.end_unit, k.stash_versions, m.stage_bytes()});
      // Everything above the idle process is the stage's, loading included (TorchScript's
      // compilation of a stage's code grows faster than its units), so only the idle process
      // is every stage's.
      out.planning.stage_baseline_bytes =
          std::max(out.planning.stage_baseline_bytes, m.baseline_bytes);
    }
    profile = formula;
    calibrate_on_measurements(&profile, units);
  };

  // 1. Calibrate on the stages the formula gives this pool (or, when the formula already finds
  //    the pool too small, on those it would get if memory were no object).
  {
    PoolPlan first;
    std::vector<NodeConfig> nodes = pool;
    try {
      first = plan_pool(profile, pool, seed, out.planning);
    } catch (const PoolTooSmall&) {
      for (auto& node : nodes) node.ram_gb = 1e6;
      first = plan_pool(profile, nodes, seed, out.planning);
    }
    measure_plan(first, nodes);
  }
  // 2. Plan the real pool with what was measured, until every stage of a plan is measured and
  //    fits.
  std::string refusal;
  for (int r = 0; r < kMaxMemoryRounds; ++r) {
    try {
      out.plan = plan_pool(profile, pool, seed, out.planning);
    } catch (const PoolTooSmall& e) {
      std::string what = e.what();
      if (what.find("node_") == std::string::npos && !pool.empty()) {
        const auto largest = std::max_element(
            pool.begin(), pool.end(),
            [](const NodeConfig& a, const NodeConfig& b) { return a.ram_bytes() < b.ram_bytes(); });
        what += "; the largest node, " + largest->name + ", has " +
                format_bytes(largest->ram_bytes());
      }
      throw PoolTooSmall("as measured (" + std::to_string(out.measurements) +
                         " stage(s) trained once by a probe, " +
                         format_bytes(static_cast<double>(out.planning.stage_baseline_bytes)) +
                         " of each a daemon's own, and the planner's " + margin_text() +
                         "): " + what);
    }
    measure_plan(out.plan, pool);
    refusal.clear();
    out.measured.assign(out.plan.clusters.size(), {});
    for (size_t c = 0; c < out.plan.clusters.size(); ++c) {
      const auto& cluster = out.plan.clusters[c];
      for (size_t s = 0; s < cluster.stages.size(); ++s) {
        const auto& stage = cluster.stages[s];
        const StageMeasurement memory = *find(stage_to_measure(out.planning, out.plan, c, s));
        out.measured[c].push_back(memory);
        const auto node = std::find_if(pool.begin(), pool.end(), [&](const NodeConfig& n) {
          return n.id == stage.node_id;
        });
        if (node == pool.end()) throw std::logic_error("plan_on_measurements: a node not in the pool");
        const double need = static_cast<double>(memory.peak_bytes) * memory_margin();
        if (need > node->ram_bytes() && refusal.empty()) {
          refusal = node->name + ": its stage (units " + std::to_string(stage.first_unit) + ".." +
                    std::to_string(stage.end_unit - 1) + ") needs " + format_bytes(need) +
                    " (a measured peak of " +
                    format_bytes(static_cast<double>(memory.peak_bytes)) + " and the planner's " +
                    margin_text() + "), more than its " + format_bytes(node->ram_bytes()) +
                    " of RAM; this pool cannot train the model as measured";
        }
      }
    }
    if (refusal.empty()) return out;
    log("memory: round " + std::to_string(r + 1) + " does not fit as measured (" + refusal +
        "); planning again on the measurements");
  }
  throw PoolTooSmall(refusal);
}

}  // namespace ravnest::planner
