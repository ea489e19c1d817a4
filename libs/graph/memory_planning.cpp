#include "libs/graph/memory_planning.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

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

using Probed = std::vector<std::pair<planner::StageToMeasure, StageMemory>>;

// Each stage's inputs, micro-batch by micro-batch, as the chain before it computes them (the
// chain's stage files under dir, the nodes in pipeline order).
std::vector<std::vector<std::vector<c10::IValue>>> stage_inputs(
    const fs::path& dir, const std::vector<config::NodeMetadata>& chain_nodes,
    const std::vector<at::Tensor>& inputs, int64_t batch, const planner::PlanningOptions& planning) {
  const size_t stages = chain_nodes.size();
  const int in_flight = planner::forwards_in_flight(planning, stages);
  const int count = static_cast<int>(
      std::min<int64_t>(std::max(std::max(planning.micro_batches, 1), in_flight), batch));
  std::vector<std::vector<std::vector<c10::IValue>>> per_stage(stages);
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
  return per_stage;
}

// One probe: the stage file with its inputs saved to inputs_path (and the inputs then freed),
// in the role `want` asks.
StageMemory probe_stage(const planner::StageToMeasure& want, const std::string& stage_path,
                        const fs::path& inputs_path, std::vector<std::vector<c10::IValue>>& inputs,
                        const MemoryProbe& probe) {
  StageProbe request;
  request.stage_path = stage_path;
  request.inputs_path = inputs_path.string();
  save_probe_inputs(request.inputs_path, inputs);
  inputs.clear();
  request.root = want.root;
  request.leaf = want.leaf;
  request.in_flight = want.in_flight;
  request.stash_versions = want.stash_versions;
  request.ring = want.averaged;
  const StageMemory memory = probe(request);
  fs::remove(request.inputs_path);
  return memory;
}

// "memory: units A..B (i/n) peak P measured (phases; baseline of it a process's own)".
void log_measured(const planner::StagePlan& stage, size_t index, size_t stages,
                  const StageMemory& memory, const std::function<void(const std::string&)>& log) {
  std::string phases;
  for (const auto& [name, bytes] : memory.phases) {
    phases += (phases.empty() ? "" : ", ") + name + " " + format_bytes(bytes);
  }
  log("memory: units " + std::to_string(stage.first_unit) + ".." +
      std::to_string(stage.end_unit - 1) + " (" + std::to_string(index + 1) + "/" +
      std::to_string(stages) + ") peak " + format_bytes(memory.peak_bytes) + " measured (" +
      phases + "; " + format_bytes(memory.baseline_bytes) + " of it a process's own)");
}

// Each planned node's stage as probed (a probe serves every stage it is the same probe of).
std::map<int, StageMemory> measured_by_node(const planner::PoolPlan& plan,
                                            const planner::PlanningOptions& planning,
                                            const Probed& probed) {
  std::map<int, StageMemory> by_node;
  for (size_t c = 0; c < plan.clusters.size(); ++c) {
    const auto& cluster = plan.clusters[c];
    for (size_t s = 0; s < cluster.stages.size(); ++s) {
      const auto want = planner::stage_to_measure(planning, plan, c, s);
      const auto it = std::find_if(probed.begin(), probed.end(),
                                   [&](const auto& p) { return p.first.same_probe(want); });
      if (it == probed.end()) throw std::logic_error("plan_with_measured_memory: a stage not probed");
      by_node[cluster.stages[s].node_id] = it->second;
    }
  }
  return by_node;
}

}  // namespace

MeasuredPlan plan_with_measured_memory(const CutModel& model, planner::ModelProfile profile,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<config::NodeConfig>& pool,
                                       const PlanHeader& header, const MemoryProbe& probe,
                                       const std::string& scratch_dir,
                                       const std::function<void(const std::string&)>& log) {
  int round = 0;
  const int64_t batch = inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);
  Probed probed;

  // Cuts `plan`'s stages and probes those asked for (which ones, and what the plan makes of
  // them, is planner::plan_on_measurements' decision).
  auto measure = [&](const planner::PoolPlan& plan, const std::vector<config::NodeConfig>& nodes,
                     const planner::PlanningOptions& planning,
                     const std::vector<planner::StageToMeasure>& wanted) {
    const fs::path dir = fs::path(scratch_dir) / ("round-" + std::to_string(round++));
    fs::create_directories(dir);
    PlanHeader round_header = header;
    round_header.planning = planning;
    // Only the clusters a probe is asked of are cut and written: a stage's file depends on its
    // cluster's cut alone, and the node files of a whole large pool (every ring member in each)
    // cost seconds (1,000 one-stage clusters: about 3 s of writing before their one probe).
    planner::PoolPlan probed_clusters;
    std::vector<size_t> cluster_of;  // probed_clusters.clusters[i] is plan.clusters[cluster_of[i]]
    for (size_t c = 0; c < plan.clusters.size(); ++c) {
      if (std::any_of(wanted.begin(), wanted.end(), [&](const auto& w) { return w.cluster == c; })) {
        probed_clusters.clusters.push_back(plan.clusters[c]);
        cluster_of.push_back(c);
      }
    }
    const auto metadata = write_plan(model, probed_clusters, nodes, round_header, dir.string());
    std::map<int, config::NodeMetadata> by_id;
    for (const auto& m : metadata) by_id[m.node_id] = m;
    const config::PlanLayout layout(dir.string());
    std::vector<planner::StageMeasurement> out(wanted.size());
    for (size_t i = 0; i < cluster_of.size(); ++i) {
      const size_t c = cluster_of[i];
      const auto& cluster = plan.clusters[c];
      const size_t stages = cluster.stages.size();
      std::vector<size_t> here;  // what `wanted` asks of this cluster
      for (size_t w = 0; w < wanted.size(); ++w) {
        if (wanted[w].cluster == c) here.push_back(w);
      }
      std::vector<config::NodeMetadata> chain_nodes;
      for (const auto& stage : cluster.stages) chain_nodes.push_back(by_id.at(stage.node_id));
      auto per_stage = stage_inputs(dir, chain_nodes, inputs, batch, planning);
      for (size_t w : here) {
        const auto& want = wanted[w];
        const auto& stage = cluster.stages[want.stage];
        const StageMemory memory = probe_stage(want, layout.resolve(by_id.at(stage.node_id).stage_file),
                                               dir / ("inputs_" + std::to_string(stage.node_id) + ".pt"),
                                               per_stage[want.stage], probe);
        probed.emplace_back(want, memory);
        out[w] = planner::StageMeasurement{memory.peak_bytes, memory.baseline_bytes};
        log_measured(stage, want.stage, stages, memory, log);
      }
    }
    fs::remove_all(dir);
    return out;
  };

  auto planned =
      planner::plan_on_measurements(profile, pool, header.seed, header.planning, measure, log);
  MeasuredPlan out;
  out.plan = std::move(planned.plan);
  out.planning = planned.planning;
  out.probes = planned.measurements;
  out.by_node = measured_by_node(out.plan, out.planning, probed);
  return out;
}

}  // namespace ravnest::graph
