#include "libs/graph/stage_writer.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "libs/base/atomic_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/base/sha256.h"
#include "libs/planner/rings.h"

namespace ravnest::graph {

namespace fs = std::filesystem;

namespace {

config::Role role_for(size_t position, size_t size) {
  if (size == 1) return config::Role::kRootLeaf;
  if (position == 0) return config::Role::kRoot;
  if (position + 1 == size) return config::Role::kLeaf;
  return config::Role::kStem;
}

void add_unique(std::vector<int>& list, int id) {
  if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
}

// A stage's inputs and outputs: from the model's inputs or another node's outputs, to the nodes
// that consume them; its neighbours each way, sorted.
void wire_stage(config::NodeMetadata& meta, const CutStage& wiring,
                const planner::ClusterPlan& cluster) {
  for (size_t i = 0; i < wiring.inputs.size(); ++i) {
    config::StageInput input;
    const CutInput& source = wiring.inputs[i];
    input.value = source.value;
    input.type = source.type;
    if (source.model_input >= 0) {
      input.model_input = source.model_input;
    } else {
      input.from_node = cluster.stages[source.stage].node_id;
      input.from_output = source.output;
      add_unique(meta.backward_neighbours, *input.from_node);
    }
    meta.inputs.push_back(input);
  }
  for (size_t j = 0; j < wiring.outputs.size(); ++j) {
    config::StageOutput output;
    output.value = wiring.outputs[j].value;
    output.type = wiring.outputs[j].type;
    for (int consumer : wiring.outputs[j].consumers) {
      output.to_nodes.push_back(cluster.stages[consumer].node_id);
      add_unique(meta.forward_neighbours, output.to_nodes.back());
    }
    meta.outputs.push_back(output);
  }
  std::sort(meta.forward_neighbours.begin(), meta.forward_neighbours.end());
  std::sort(meta.backward_neighbours.begin(), meta.backward_neighbours.end());
}

// Stage s's file, saved under meta.stage_file, or the same stage written before (`written`,
// when given: same units, inputs, outputs and held state) reused.
WrittenStage save_or_reuse_stage(const CutModel& model, const std::vector<CutStage>& wiring,
                                 size_t s, const planner::StagePlan& stage_plan,
                                 const config::NodeMetadata& meta, const std::string& node_name,
                                 const config::PlanLayout& layout, WrittenStages* written) {
  // What makes the stage's file: its units, its inputs and outputs, the state it holds.
  std::string key = std::to_string(stage_plan.first_unit) + "-" +
                    std::to_string(stage_plan.end_unit);
  for (const auto& input : meta.inputs) key += " <" + input.value;
  for (const auto& output : meta.outputs) key += " >" + output.value;
  for (const auto& held : wiring[s].held) key += " ." + held;
  const auto found = written ? written->find(key) : WrittenStages::iterator{};
  if (written && found != written->end()) return found->second;
  WrittenStage stage;
  stage.stage_file = meta.stage_file;
  const fs::path stage_path = layout.resolve(stage.stage_file);
  SavedStage saved = model.save_stage(wiring, s, node_name, stage_path.string());
  stage.stage_sha256 = base::sha256_hex(base::read_file(stage_path.string()));
  stage.parameters = std::move(saved.parameters);
  stage.trained_parameters = std::move(saved.trained_parameters);
  stage.parameter_count = saved.parameter_count;
  stage.draws_random_numbers = saved.draws_random_numbers;
  if (written) written->emplace(key, stage);
  return stage;
}

// meta's tensors that other nodes of the cluster hold too (holders_of: canonical name -> node
// ids), and those tied to another name.
template <typename CanonicalOf>
void share_tensors(config::NodeMetadata& meta,
                   const std::map<std::string, std::vector<int>>& holders_of,
                   const CanonicalOf& canonical_of) {
  for (const auto& name : meta.parameters) {
    auto holders = holders_of.find(canonical_of(name));
    if (holders != holders_of.end() && holders->second.size() > 1) {
      meta.shared_parameters[name] = holders->second;
    }
    if (canonical_of(name) != name) meta.tied_parameters[name] = canonical_of(name);
  }
}

}  // namespace

std::vector<config::NodeMetadata> write_cluster_stages(
    const CutModel& model, const planner::ClusterPlan& cluster,
    const std::map<int, config::NodeConfig>& nodes, const std::string& dir,
    WrittenStages* written) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& stage : cluster.stages) ranges.emplace_back(stage.first_unit, stage.end_unit);
  const auto wiring = model.cut(ranges);

  const auto canonical = model.canonical_names();
  auto canonical_of = [&](const std::string& name) {
    auto it = canonical.find(name);
    return it == canonical.end() ? name : it->second;
  };

  std::vector<config::NodeMetadata> out;
  std::map<std::string, std::vector<int>> holders_of;  // canonical trained tensor -> node ids
  std::vector<int> random_nodes;                       // in pipeline order
  const config::PlanLayout layout(dir);
  fs::create_directories(layout.stages_dir());
  for (size_t s = 0; s < wiring.size(); ++s) {
    const auto& stage_plan = cluster.stages[s];
    const auto& node = nodes.at(stage_plan.node_id);
    config::NodeMetadata meta;
    meta.node_id = node.id;
    meta.name = node.name;
    meta.address = node.address;
    meta.cluster = cluster.id;
    meta.position = static_cast<int>(s);
    meta.cluster_size = static_cast<int>(wiring.size());
    meta.role = role_for(s, wiring.size());
    meta.stage_file = config::PlanLayout::stage_file(node.id);
    meta.returns_model_output = wiring[s].is_leaf;
    wire_stage(meta, wiring[s], cluster);
    const WrittenStage stage =
        save_or_reuse_stage(model, wiring, s, stage_plan, meta, node.name, layout, written);
    meta.stage_file = stage.stage_file;
    meta.stage_sha256 = stage.stage_sha256;
    meta.parameters = stage.parameters;
    // Only trained tensors need their copies kept equal; a buffer that several stages read (a
    // causal mask) is simply copied into each.
    for (const auto& name : stage.trained_parameters) {
      add_unique(holders_of[canonical_of(name)], node.id);
    }
    meta.estimates.parameter_count = stage.parameter_count;
    meta.estimates.parameter_bytes = stage_plan.cost.parameter_bytes;
    meta.estimates.memory_bytes = stage_plan.cost.memory_bytes;
    meta.estimates.step_seconds = stage_plan.cost.step_seconds;
    meta.estimates.forward_bytes_per_sample = stage_plan.cost.forward_bytes_per_sample;
    if (stage.draws_random_numbers) random_nodes.push_back(node.id);
    out.push_back(std::move(meta));
  }
  for (auto& meta : out) {
    for (const auto& stage : cluster.stages) {
      meta.pipeline.push_back(stage.node_id);
      meta.addresses[stage.node_id] = nodes.at(stage.node_id).address;
    }
    meta.random_nodes = random_nodes;
  }
  // A tensor on several nodes of the cluster (a module used twice, tied weights) needs its
  // gradients summed across them.
  for (auto& meta : out) share_tensors(meta, holders_of, canonical_of);
  return out;
}

void write_node_files(const std::vector<config::NodeMetadata>& nodes, const std::string& dir) {
  const config::PlanLayout layout(dir);
  fs::create_directories(layout.nodes_dir());
  for (const auto& meta : nodes) {
    // Into a staging directory synced and renamed as a whole (clusterize.cpp): a fsync each
    // made 1,000 node files take 15 s.
    base::write_file_unsynced(layout.node_file(meta.node_id), config::to_json(meta));
  }
}

config::PlanFile plan_file_header(const PlanHeader& header) {
  config::PlanFile out;
  out.model = fs::absolute(header.model_path).string();
  out.model_sha256 = base::sha256_hex(base::read_file(header.model_path));
  out.seed = header.seed;
  out.example_inputs = header.example_inputs;
  const auto& p = header.planning;
  if (p.schedule || p.activations != config::WireCodec::kNone ||
      p.gradients != config::WireCodec::kNone) {
    out.planning = config::PlanPlanning{p.schedule ? config::to_string(*p.schedule) : "unmodelled",
                                        p.micro_batches, p.max_in_flight,
                                        config::to_string(p.activations),
                                        config::to_string(p.gradients)};
  }
  return out;
}

void pin_certificates(std::vector<config::NodeMetadata>& nodes,
                      const std::map<int, config::NodeConfig>& pool) {
  std::map<std::string, std::string> pins;  // of the plan's nodes only
  for (const auto& meta : nodes) {
    const auto& pin = pool.at(meta.node_id).tls_fingerprint;
    if (!pin.empty()) pins[meta.address] = pin;
  }
  for (auto& meta : nodes) meta.tls_fingerprints = pins;
}

std::vector<config::NodeMetadata> write_plan(const CutModel& model, const planner::PoolPlan& plan,
                                             const std::vector<config::NodeConfig>& pool,
                                             const PlanHeader& header, const std::string& dir) {
  std::map<int, config::NodeConfig> node_config;
  for (const auto& node : pool) node_config[node.id] = node;
  config::PlanFile plan_file = plan_file_header(header);
  plan_file.samples_per_second = plan.samples_per_second;
  std::vector<config::NodeMetadata> nodes;
  WrittenStages written;  // clusters cut alike share their stage files
  for (const auto& cluster : plan.clusters) {
    auto cluster_nodes = write_cluster_stages(model, cluster, node_config, dir, &written);
    config::PlanCluster entry{cluster.id, cluster.samples_per_second, {}};
    for (const auto& meta : cluster_nodes) entry.nodes.push_back(meta.node_id);
    plan_file.clusters.push_back(std::move(entry));
    for (auto& meta : cluster_nodes) nodes.push_back(std::move(meta));
  }
  pin_certificates(nodes, node_config);
  for (auto& meta : nodes) meta.cluster_count = static_cast<int>(plan.clusters.size());
  plan_file.rings = planner::assign_rings(nodes);
  write_node_files(nodes, dir);
  base::write_file_atomically(config::PlanLayout(dir).plan_file(), config::to_json(plan_file));
  return nodes;
}

}  // namespace ravnest::graph
