#include "libs/graph/ps_plan_writer.h"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "libs/config/atomic_file.h"
#include "libs/config/plan_layout.h"
#include "libs/graph/stage_builder.h"

namespace ravnest::graph {

std::vector<planner::StateTensor> state_tensors_for_servers(const ModelGraph& model) {
  std::vector<planner::StateTensor> out;
  std::unordered_map<const c10::TensorImpl*, std::string> first_name_of;
  for (const auto& [name, tensor] : named_state(const_cast<ModelGraph&>(model).module())) {
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

std::vector<config::NodeMetadata> write_parameter_server_plan(
    const ModelGraph& model, const planner::PsPoolPlan& plan,
    const std::vector<config::NodeConfig>& pool, const PlanHeader& header, const std::string& dir) {
  std::map<int, config::NodeConfig> node_config;
  for (const auto& node : pool) node_config[node.id] = node;
  const size_t units = model.units().size();

  // The roles in the order the metadata lists them, with each one's estimates.
  struct Member {
    int node_id;
    config::Role role;
    int cluster;
    planner::StageCost cost;
  };
  std::vector<Member> members;
  config::ParameterServerPlan ps;
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    const auto& worker = plan.workers[w];
    planner::StageCost cost = worker.cost;
    cost.transfer_seconds = worker.exchange_seconds;
    cost.step_seconds = cost.compute_seconds + cost.transfer_seconds;
    members.push_back({worker.node_id, config::Role::kWorker, static_cast<int>(w), cost});
    ps.workers.push_back({worker.node_id, node_config.at(worker.node_id).address});
  }
  for (const auto& server : plan.servers) {
    planner::StageCost cost;
    cost.memory_bytes = server.memory_bytes;
    cost.transfer_seconds = server.exchange_seconds;
    cost.step_seconds = server.exchange_seconds;
    cost.parameter_bytes = server.shard_bytes;
    members.push_back({server.node_id, config::Role::kServer, -1, cost});
    ps.servers.push_back({server.node_id, node_config.at(server.node_id).address, server.tensors});
  }
  if (plan.evaluator) {
    planner::StageCost cost;
    cost.memory_bytes = plan.evaluator_memory_bytes;
    members.push_back({*plan.evaluator, config::Role::kEvaluator, -1, cost});
    ps.evaluator = config::PsPeer{*plan.evaluator, node_config.at(*plan.evaluator).address};
  }

  std::map<std::string, int64_t> parameter_counts;
  for (const auto& p : const_cast<ModelGraph&>(model).module().named_parameters()) {
    parameter_counts[p.name] = p.value.numel();
  }
  size_t servers_written = 0;
  std::vector<config::NodeMetadata> nodes;
  for (const auto& member : members) {
    planner::ClusterPlan whole;
    whole.id = member.cluster;
    whole.stages.push_back({member.node_id, 0, units, member.cost});
    auto written = write_cluster_stages(model, whole, node_config, dir);
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
  pin_certificates(nodes, node_config);

  nlohmann::json plan_json = plan_json_common(header);
  plan_json["mode"] = "parameter_server";
  plan_json["samples_per_second"] = plan.samples_per_second;
  plan_json["step_seconds"] = plan.step_seconds;
  plan_json["clusters"] = nlohmann::json::array();
  for (size_t w = 0; w < plan.workers.size(); ++w) {
    plan_json["clusters"].push_back(
        {{"id", w},
         {"samples_per_second", plan.samples_per_second / static_cast<double>(plan.workers.size())},
         {"nodes", {plan.workers[w].node_id}}});
  }
  plan_json["rings"] = nlohmann::json::array();
  nlohmann::json servers = nlohmann::json::array();
  for (const auto& server : plan.servers) {
    servers.push_back({{"node", server.node_id},
                       {"tensors", server.tensors.size()},
                       {"bytes", server.shard_bytes},
                       {"exchange_seconds", server.exchange_seconds}});
  }
  plan_json["parameter_server"] = {{"servers", servers}};
  if (plan.evaluator) plan_json["parameter_server"]["evaluator"] = *plan.evaluator;
  plan_json["unplaced_nodes"] = plan.unplaced_nodes;

  write_node_files(nodes, dir);
  config::write_file_atomically(config::PlanLayout(dir).plan_file(), plan_json.dump(2) + "\n");
  return nodes;
}

}  // namespace ravnest::graph
