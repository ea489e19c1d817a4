#include "libs/graph/ps_plan_writer.h"

#include <filesystem>
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/base/atomic_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/base/sha256.h"
#include "libs/torch_support/module_file.h"
#include "libs/graph/stage_builder.h"
#include "libs/planner/rings.h"

namespace ravnest::graph {

std::vector<planner::StateTensor> state_tensors_for_servers(const CutModel& model) {
  std::vector<planner::StateTensor> out;
  std::unordered_map<const c10::TensorImpl*, std::string> first_name_of;
  for (const auto& [name, tensor] : model.named_state()) {
    auto [it, fresh] = first_name_of.emplace(tensor.unsafeGetTensorImpl(), name);
    if (!fresh) {
      throw std::invalid_argument("a parameter-server plan cannot hold tied weights: " + name +
                                  " is " + it->second + " (use a pipeline plan)");
    }
    out.push_back({name, static_cast<int64_t>(tensor.numel()) *
                             static_cast<int64_t>(tensor.element_size())});
  }
  return out;
}

namespace {

// The nodes of a parameter-server or hybrid plan, each with the whole model as its stage.
std::vector<config::NodeMetadata> write_role_nodes(const CutModel& model,
                                                   const planner::PsPoolPlan& plan,
                                                   const config::ParameterServerPlan& ps,
                                                   const std::map<int, config::NodeConfig>& pool,
                                                   const std::string& dir) {
  const size_t units = model.unit_count();
  struct Member {
    int node_id;
    config::Role role;
    int cluster;
    planner::StageCost cost;
  };
  std::vector<Member> members;
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    planner::StageCost cost = plan.workers[w].cost;
    cost.transfer_seconds = plan.workers[w].exchange_seconds;
    cost.step_seconds = cost.compute_seconds + cost.transfer_seconds;
    members.push_back({plan.workers[w].node_id, config::Role::kWorker, static_cast<int>(w), cost});
  }
  for (const auto& server : plan.servers) {
    planner::StageCost cost;
    cost.memory_bytes = server.memory_bytes;
    cost.transfer_seconds = server.exchange_seconds;
    cost.step_seconds = server.exchange_seconds;
    cost.parameter_bytes = server.shard_bytes;
    members.push_back({server.node_id, config::Role::kServer, -1, cost});
  }
  if (plan.evaluator) {
    planner::StageCost cost;
    cost.memory_bytes = plan.evaluator_memory_bytes;
    members.push_back({*plan.evaluator, config::Role::kEvaluator, -1, cost});
  }
  std::map<std::string, int64_t> parameter_counts;
  for (const auto& [name, value] : model.named_parameters()) parameter_counts[name] = value.numel();
  size_t servers_written = 0;
  std::vector<config::NodeMetadata> nodes;
  for (const auto& member : members) {
    planner::ClusterPlan whole;
    whole.id = member.cluster;
    whole.stages.push_back({member.node_id, 0, units, member.cost});
    auto written = write_cluster_stages(model, whole, pool, dir);
    config::NodeMetadata meta = std::move(written.at(0));
    meta.role = member.role;
    meta.cluster = member.cluster;
    meta.cluster_count = static_cast<int>(plan.workers.size());
    meta.parameter_server = ps;
    if (member.role == config::Role::kServer) {  // what its shard holds
      meta.estimates.parameter_bytes = member.cost.parameter_bytes;
      meta.estimates.parameter_count = 0;
      for (const auto& name : ps.servers[servers_written++].tensors) {
        if (auto count = parameter_counts.find(name); count != parameter_counts.end()) {
          meta.estimates.parameter_count += count->second;
        }
      }
    }
    nodes.push_back(std::move(meta));
  }
  pin_certificates(nodes, pool);
  return nodes;
}

config::ParameterServerPlan roles_of(const planner::PsPoolPlan& plan,
                                     const std::map<int, config::NodeConfig>& pool) {
  config::ParameterServerPlan ps;
  for (const auto& worker : plan.workers) {
    ps.workers.push_back({worker.node_id, pool.at(worker.node_id).address});
  }
  for (const auto& server : plan.servers) {
    ps.servers.push_back({server.node_id, pool.at(server.node_id).address, server.tensors});
  }
  if (plan.evaluator) ps.evaluator = config::PsPeer{*plan.evaluator, pool.at(*plan.evaluator).address};
  return ps;
}

// plan.json of a parameter-server plan ("mode": `mode`): one cluster per worker, no rings yet.
config::PlanFile role_plan_file(const planner::PsPoolPlan& plan, const PlanHeader& header,
                                const std::string& mode) {
  config::PlanFile out = plan_file_header(header);
  out.mode = mode;
  out.samples_per_second = plan.samples_per_second;
  out.step_seconds = plan.step_seconds;
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    out.clusters.push_back(
        {static_cast<int>(w), plan.samples_per_second / static_cast<double>(plan.workers.size()),
         {plan.workers[w].node_id}});
  }
  config::PlanParameterServer ps;
  for (const auto& server : plan.servers) {
    ps.servers.push_back({server.node_id, server.tensors.size(), server.shard_bytes,
                          server.exchange_seconds});
  }
  ps.evaluator = plan.evaluator;
  out.parameter_server = std::move(ps);
  out.unplaced_nodes = plan.unplaced_nodes;
  return out;
}

}  // namespace

std::vector<config::NodeMetadata> write_parameter_server_plan(
    const CutModel& model, const planner::PsPoolPlan& plan,
    const std::vector<config::NodeConfig>& pool, const PlanHeader& header, const std::string& dir) {
  std::map<int, config::NodeConfig> node_config;
  for (const auto& node : pool) node_config[node.id] = node;
  auto nodes = write_role_nodes(model, plan, roles_of(plan, node_config), node_config, dir);
  write_node_files(nodes, dir);
  base::write_file_atomically(config::PlanLayout(dir).plan_file(),
                              config::to_json(role_plan_file(plan, header, "parameter_server")));
  return nodes;
}

std::vector<config::NodeMetadata> write_hybrid_plan(
    const ModelGraph& model, const planner::PsPoolPlan& plan,
    const std::vector<SparseTableUse>& tables, const std::vector<config::NodeConfig>& pool,
    const PlanHeader& header, const std::string& dir) {
  std::map<int, config::NodeConfig> node_config;
  for (const auto& node : pool) node_config[node.id] = node;
  config::ParameterServerPlan ps = roles_of(plan, node_config);
  std::set<std::string> table_names;
  for (const auto& table : tables) {
    int server = -1;
    for (const auto& s : plan.servers) {
      if (std::find(s.tensors.begin(), s.tensors.end(), table.weight) != s.tensors.end()) {
        server = s.node_id;
      }
    }
    if (server < 0) throw std::logic_error("no server holds " + table.weight);
    ps.sparse_tables.push_back({table.weight, server, table.index_input, table.shape});
    table_names.insert(table.weight);
  }
  auto nodes = write_role_nodes(model, plan, ps, node_config, dir);

  // Trainers: each table's weight becomes an empty placeholder, filled with rows at each forward.
  const config::PlanLayout layout(dir);
  std::vector<config::NodeMetadata> trainers;
  for (auto& meta : nodes) {
    if (meta.role != config::Role::kWorker) continue;
    const std::string path = layout.resolve(meta.stage_file);
    torch::jit::Module stage = torch_support::load_module(path);
    for (const auto& table : tables) {
      torch::jit::Module owner = stage;
      for (size_t start = 0;;) {
        const size_t dot = table.submodule.find('.', start);
        owner = owner.attr(table.submodule.substr(
                                start, dot == std::string::npos ? dot : dot - start))
                    .toModule();
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      const at::Tensor weight = owner.attr("weight").toTensor();
      std::vector<int64_t> empty = weight.sizes().vec();
      empty[0] = 0;
      owner.setattr("weight", at::empty(empty, weight.options()).requires_grad_(weight.requires_grad()));
    }
    torch_support::save_module_atomically(stage, path);
    meta.stage_sha256 = base::sha256_hex(base::read_file(path));
    meta.parameters.erase(std::remove_if(meta.parameters.begin(), meta.parameters.end(),
                                         [&](const std::string& n) { return table_names.count(n); }),
                          meta.parameters.end());
    meta.estimates.parameter_count = 0;
    for (const auto& p : stage.named_parameters()) meta.estimates.parameter_count += p.value.numel();
    trainers.push_back(meta);
  }
  // The dense part is averaged over rings between the trainers, as between clusters.
  const auto rings = planner::assign_rings(trainers);
  for (auto& meta : nodes) {
    for (const auto& trainer : trainers) {
      if (trainer.node_id == meta.node_id) meta.rings = trainer.rings;
    }
  }
  config::PlanFile plan_file = role_plan_file(plan, header, "hybrid");
  plan_file.rings = rings;
  plan_file.parameter_server->sparse_tables = ps.sparse_tables;
  write_node_files(nodes, dir);
  base::write_file_atomically(layout.plan_file(), config::to_json(plan_file));
  return nodes;
}

}  // namespace ravnest::graph
