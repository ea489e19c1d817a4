#include "libs/graph/memory_planning.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include <torch/csrc/autograd/grad_mode.h>

#include "libs/base/byte_size.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/data/batch_order.h"
#include "libs/graph/stage_chain.h"

namespace ravnest::graph {

namespace fs = std::filesystem;

namespace {

// Bytes as every report of the project writes them; the pool's RAM is a double of bytes.
std::string format_bytes(double bytes) {
  return base::format_bytes(bytes > 0 ? static_cast<uint64_t>(bytes) : 0);
}

// What a stage's measurement depends on besides its units: the schedule's load on it and its
// place (the root takes data, the leaf computes the loss).
using ProbeKey = std::tuple<size_t, size_t, int, int64_t, bool, bool, bool>;

// Forwards a daemon keeps alive at once (libs/training/schedule.h): GPipe all of a batch, 1F1B
// at most the stages, async max_in_flight (0: the stages). Without a schedule: GPipe.
int in_flight_of(const planner::PlanningOptions& p, size_t stages) {
  const int m = std::max(p.micro_batches, 1);
  if (!p.schedule || *p.schedule == config::PipelineSchedule::kGPipe) return m;
  const int s = static_cast<int>(stages);
  if (*p.schedule == config::PipelineSchedule::k1F1B) return std::min(m, s);
  return p.max_in_flight > 0 ? p.max_in_flight : s;
}

}  // namespace

MeasuredPlan plan_with_measured_memory(const CutModel& model, planner::ModelProfile profile,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<config::NodeConfig>& pool,
                                       const PlanHeader& header, const MemoryProbe& probe,
                                       const std::string& scratch_dir,
                                       const std::function<void(const std::string&)>& log) {
  MeasuredPlan out;
  out.planning = header.planning;
  std::map<ProbeKey, StageMemory> measured;
  int round = 0;
  const int64_t batch = inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);

  // Stages of a plan of several clusters are averaged over rings (so are stages sharing a
  // parameter inside a cluster, whose rings hold only those parameters: not modelled).
  auto key_of = [&](const planner::PoolPlan& plan, const planner::ClusterPlan& cluster, size_t s) {
    const bool averaged = plan.clusters.size() > 1;
    const size_t stages = cluster.stages.size();
    const auto& stage = cluster.stages[s];
    return ProbeKey{stage.first_unit, stage.end_unit, in_flight_of(out.planning, stages),
                    planner::stashed_versions(out.planning, stages), s == 0, s + 1 == stages,
                    averaged};
  };

  // Cuts `plan`'s stages, probes those not measured yet, and calibrates the model on them.
  auto measure = [&](const planner::PoolPlan& plan, const std::vector<config::NodeConfig>& nodes) {
    const fs::path dir = fs::path(scratch_dir) / ("round-" + std::to_string(round++));
    fs::create_directories(dir);
    PlanHeader round_header = header;
    round_header.planning = out.planning;
    const auto metadata = write_plan(model, plan, nodes, round_header, dir.string());
    std::map<int, config::NodeMetadata> by_id;
    for (const auto& m : metadata) by_id[m.node_id] = m;
    const config::PlanLayout layout(dir.string());
    for (const auto& cluster : plan.clusters) {
      const size_t stages = cluster.stages.size();
      std::vector<size_t> wanted;
      for (size_t s = 0; s < stages; ++s) {
        if (!measured.count(key_of(plan, cluster, s))) wanted.push_back(s);
      }
      if (wanted.empty()) continue;
      // Each stage's inputs, micro-batch by micro-batch, as the chain before it computes them.
      const int in_flight = in_flight_of(out.planning, stages);
      const int count = static_cast<int>(
          std::min<int64_t>(std::max(std::max(out.planning.micro_batches, 1), in_flight), batch));
      std::vector<config::NodeMetadata> chain_nodes;
      for (const auto& stage : cluster.stages) chain_nodes.push_back(by_id.at(stage.node_id));
      std::vector<std::vector<std::vector<c10::IValue>>> per_stage(stages);
      {
        auto chain = StageChain::load(dir.string(), chain_nodes);
        chain.train(true);
        torch::NoGradGuard no_grad;
        for (const auto& [begin, end] : data::split_micro_batches(batch, count)) {
          std::vector<c10::IValue> part;
          for (const auto& t : inputs) {
            part.emplace_back(t.dim() == 0 ? t : t.slice(0, begin, end).clone());
          }
          auto pass = chain.forward(part);
          for (size_t s = 0; s < stages; ++s) per_stage[s].push_back(pass.received[s]);
        }
      }
      for (size_t s : wanted) {
        const auto& stage = cluster.stages[s];
        const auto& meta = by_id.at(stage.node_id);
        StageProbe request;
        request.stage_path = layout.resolve(meta.stage_file);
        request.inputs_path = (dir / ("inputs_" + std::to_string(stage.node_id) + ".pt")).string();
        save_probe_inputs(request.inputs_path, per_stage[s]);
        per_stage[s].clear();
        request.root = s == 0;
        request.leaf = s + 1 == stages;
        request.in_flight = in_flight;
        request.stash_versions = planner::stashed_versions(out.planning, stages);
        request.ring = std::get<6>(key_of(plan, cluster, s));
        const StageMemory memory = probe(request);
        ++out.probes;
        fs::remove(request.inputs_path);
        measured[key_of(plan, cluster, s)] = memory;
        std::string phases;
        for (const auto& [name, bytes] : memory.phases) {
          phases += (phases.empty() ? "" : ", ") + name + " " +
                    format_bytes(bytes);
        }
        log("memory: units " + std::to_string(stage.first_unit) + ".." +
            std::to_string(stage.end_unit - 1) + " (" + std::to_string(s + 1) + "/" +
            std::to_string(stages) + ") peak " + format_bytes(memory.peak_bytes) +
            " measured (" + phases + "; " +
            format_bytes(memory.baseline_bytes) + " of it a process's own)");
      }
    }
    for (const auto& cluster : plan.clusters) {
      for (size_t s = 0; s < cluster.stages.size(); ++s) {
        const auto& stage = cluster.stages[s];
        const StageMemory& memory = measured.at(key_of(plan, cluster, s));
        // Everything above the idle process is the stage's, loading included: TorchScript's
        // compilation of a stage's code grows faster than its units (hundreds of MB for a few
        // attention blocks), so it is not a constant of every stage.
        planner::calibrate_stage_memory(&profile, stage.first_unit, stage.end_unit,
                                        memory.stage_bytes(), out.planning,
                                        cluster.stages.size());
        out.planning.stage_baseline_bytes =
            std::max(out.planning.stage_baseline_bytes, memory.baseline_bytes);
      }
    }
    fs::remove_all(dir);
  };

  // 1. Calibrate on the stages the formula gives this pool (or, when the formula already finds
  //    the pool too small, on those it would get if memory were no object).
  {
    planner::PoolPlan first;
    std::vector<config::NodeConfig> nodes = pool;
    try {
      first = planner::plan_pool(profile, pool, header.seed, out.planning);
    } catch (const planner::PoolTooSmall&) {
      for (auto& node : nodes) node.ram_gb = 1e6;
      first = planner::plan_pool(profile, nodes, header.seed, out.planning);
    }
    measure(first, nodes);
  }
  // 2. Plan the real pool with what was measured, until every stage of the plan is measured.
  std::string refusal;
  for (int r = 0; r < kMaxMemoryRounds; ++r) {
    try {
      out.plan = planner::plan_pool(profile, pool, header.seed, out.planning);
    } catch (const planner::PoolTooSmall& e) {
      std::string what = e.what();
      if (what.find("node_") == std::string::npos && !pool.empty()) {
        const auto largest = std::max_element(
            pool.begin(), pool.end(), [](const config::NodeConfig& a, const config::NodeConfig& b) {
              return a.ram_bytes() < b.ram_bytes();
            });
        what += "; the largest node, " + largest->name + ", has " +
                format_bytes(largest->ram_bytes());
      }
      throw planner::PoolTooSmall(
          "as measured (" + std::to_string(out.probes) + " stage(s) trained once by a probe, " +
          format_bytes(out.planning.stage_baseline_bytes) +
          " of each a daemon's own, and the planner's " +
          std::to_string(static_cast<int>((planner::memory_margin() - 1) * 100 + 0.5)) +
          " % margin): " + what);
    }
    measure(out.plan, pool);
    refusal.clear();
    for (const auto& cluster : out.plan.clusters) {
      for (size_t s = 0; s < cluster.stages.size(); ++s) {
        const auto& stage = cluster.stages[s];
        const StageMemory& memory = measured.at(key_of(out.plan, cluster, s));
        const auto node = std::find_if(pool.begin(), pool.end(), [&](const config::NodeConfig& n) {
          return n.id == stage.node_id;
        });
        const double need = static_cast<double>(memory.peak_bytes) * planner::memory_margin();
        if (need > node->ram_bytes() && refusal.empty()) {
          refusal = node->name + ": its stage (units " + std::to_string(stage.first_unit) + ".." +
                    std::to_string(stage.end_unit - 1) + ") needs " + format_bytes(need) +
                    " (a measured peak of " + format_bytes(memory.peak_bytes) +
                    " and the planner's " +
                    std::to_string(static_cast<int>((planner::memory_margin() - 1) * 100 + 0.5)) +
                    " % margin), more than its " + format_bytes(node->ram_bytes()) +
                    " of RAM; this pool cannot train the model as measured";
        }
      }
    }
    if (refusal.empty()) break;
    log("memory: round " + std::to_string(r + 1) + " does not fit as measured (" + refusal +
        "); planning again on the measurements");
  }
  if (!refusal.empty()) throw planner::PoolTooSmall(refusal);
  for (const auto& cluster : out.plan.clusters) {
    for (size_t s = 0; s < cluster.stages.size(); ++s) {
      out.by_node[cluster.stages[s].node_id] = measured.at(key_of(out.plan, cluster, s));
    }
  }
  return out;
}

}  // namespace ravnest::graph
