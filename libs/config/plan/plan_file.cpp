#include "libs/config/plan/plan_file.h"

#include <nlohmann/json.hpp>

#include "libs/base/json_reader.h"
#include "libs/base/atomic_file.h"

namespace ravnest::config {
namespace {

using json = nlohmann::json;
using base::JsonReader;

json planning_json(const PlanPlanning& p) {
  return {{"schedule", p.schedule},
          {"micro_batches", p.micro_batches},
          {"max_in_flight", p.max_in_flight},
          {"activations", p.activations},
          {"gradients", p.gradients}};
}

json parameter_server_json(const PlanParameterServer& ps) {
  json servers = json::array();
  for (const auto& server : ps.servers) {
    servers.push_back({{"node", server.node},
                       {"tensors", server.tensors},
                       {"bytes", server.bytes},
                       {"exchange_seconds", server.exchange_seconds}});
  }
  json out = {{"servers", servers}};
  if (ps.evaluator) out["evaluator"] = *ps.evaluator;
  if (ps.sparse_tables) {
    json sparse = json::array();
    for (const auto& t : *ps.sparse_tables) {
      sparse.push_back({{"weight", t.weight}, {"server", t.server}, {"index_input", t.index_input},
                        {"shape", t.shape}});
    }
    out["sparse_tables"] = sparse;
  }
  return out;
}

// The phases of plan_file_from_json(), one per block.

void read_header(const JsonReader& r, const json& root, PlanFile* plan) {
  plan->format = r.string(root, "", "format");
  if (plan->format != kPlanFormat) {
    r.fail("format", "expected \"" + std::string(kPlanFormat) + "\", got \"" + plan->format + "\"");
  }
  if (root.contains("model")) plan->model = r.string(root, "", "model");
  if (root.contains("model_sha256")) plan->model_sha256 = r.string(root, "", "model_sha256");
  if (root.contains("seed")) plan->seed = r.uint64(root, "", "seed");
  if (root.contains("example_inputs")) {
    plan->example_inputs = r.string_list(root, "", "example_inputs");
  }
  if (root.contains("planning")) {
    const json& p = r.object(root, "", "planning");
    plan->planning = PlanPlanning{r.string(p, "planning", "schedule"),
                                  r.int64(p, "planning", "micro_batches"),
                                  r.int64(p, "planning", "max_in_flight"),
                                  r.string(p, "planning", "activations"),
                                  r.string(p, "planning", "gradients")};
  }
  if (root.contains("mode")) plan->mode = r.string(root, "", "mode");
  if (root.contains("samples_per_second")) {
    plan->samples_per_second = r.number(root, "", "samples_per_second");
  }
  if (root.contains("step_seconds")) plan->step_seconds = r.number(root, "", "step_seconds");
  if (root.contains("unplaced_nodes")) plan->unplaced_nodes = r.int_list(root, "", "unplaced_nodes");
}

void read_clusters_and_rings(const JsonReader& r, const json& root, PlanFile* plan) {
  const json& clusters = r.array(root, "", "clusters");
  for (size_t i = 0; i < clusters.size(); ++i) {
    const std::string path = JsonReader::index("clusters", i);
    PlanCluster cluster;
    cluster.id = r.integer(clusters[i], path, "id");
    if (clusters[i].contains("samples_per_second")) {
      cluster.samples_per_second = r.number(clusters[i], path, "samples_per_second");
    }
    cluster.nodes = r.int_list(clusters[i], path, "nodes");
    plan->clusters.push_back(std::move(cluster));
  }
  if (!root.contains("rings")) return;
  const json& rings = r.array(root, "", "rings");
  for (size_t i = 0; i < rings.size(); ++i) {
    const std::string path = JsonReader::index("rings", i);
    PlanRing ring;
    ring.id = r.integer(rings[i], path, "id");
    if (rings[i].contains("parameters")) ring.parameters = r.string_list(rings[i], path, "parameters");
    ring.nodes = r.int_list(rings[i], path, "nodes");
    plan->rings.push_back(std::move(ring));
  }
}

void read_parameter_server(const JsonReader& r, const json& root, PlanFile* plan) {
  if (!root.contains("parameter_server")) return;
  const json& block = r.object(root, "", "parameter_server");
  const std::string where = "parameter_server";
  PlanParameterServer ps;
  const json& servers = r.array(block, where, "servers");
  for (size_t i = 0; i < servers.size(); ++i) {
    const std::string path = JsonReader::index(where + ".servers", i);
    PlanServer server;
    server.node = r.integer(servers[i], path, "node");
    if (servers[i].contains("tensors")) server.tensors = r.uint64(servers[i], path, "tensors");
    if (servers[i].contains("bytes")) server.bytes = r.int64(servers[i], path, "bytes");
    if (servers[i].contains("exchange_seconds")) {
      server.exchange_seconds = r.number(servers[i], path, "exchange_seconds");
    }
    ps.servers.push_back(server);
  }
  if (block.contains("evaluator")) ps.evaluator = r.integer(block, where, "evaluator");
  if (block.contains("sparse_tables")) {
    const json& tables = r.array(block, where, "sparse_tables");
    ps.sparse_tables.emplace();
    for (size_t i = 0; i < tables.size(); ++i) {
      const std::string path = JsonReader::index(where + ".sparse_tables", i);
      SparseTable table;
      table.weight = r.string(tables[i], path, "weight");
      table.server = r.integer(tables[i], path, "server");
      table.index_input = r.integer(tables[i], path, "index_input");
      const json& shape = r.array(tables[i], path, "shape");
      for (size_t d = 0; d < shape.size(); ++d) {
        table.shape.push_back(r.int64(shape[d], JsonReader::index(path + ".shape", d)));
      }
      ps.sparse_tables->push_back(std::move(table));
    }
  }
  plan->parameter_server = std::move(ps);
}

}  // namespace

std::vector<int> PlanFile::node_ids() const {
  std::vector<int> ids;
  for (const auto& cluster : clusters) ids.insert(ids.end(), cluster.nodes.begin(), cluster.nodes.end());
  if (parameter_server) {
    for (const auto& server : parameter_server->servers) ids.push_back(server.node);
    if (parameter_server->evaluator) ids.push_back(*parameter_server->evaluator);
  }
  return ids;
}

std::string to_json(const PlanFile& plan) {
  json out = {{"format", plan.format},
              {"model", plan.model},
              {"model_sha256", plan.model_sha256},
              {"seed", plan.seed},
              {"example_inputs", plan.example_inputs},
              {"samples_per_second", plan.samples_per_second}};
  if (plan.planning) out["planning"] = planning_json(*plan.planning);
  if (!plan.mode.empty()) out["mode"] = plan.mode;
  if (plan.step_seconds) out["step_seconds"] = *plan.step_seconds;
  out["clusters"] = json::array();
  for (const auto& cluster : plan.clusters) {
    out["clusters"].push_back({{"id", cluster.id},
                               {"samples_per_second", cluster.samples_per_second},
                               {"nodes", cluster.nodes}});
  }
  out["rings"] = json::array();
  for (const auto& ring : plan.rings) {
    out["rings"].push_back({{"id", ring.id}, {"parameters", ring.parameters}, {"nodes", ring.nodes}});
  }
  if (plan.parameter_server) out["parameter_server"] = parameter_server_json(*plan.parameter_server);
  if (plan.unplaced_nodes) out["unplaced_nodes"] = *plan.unplaced_nodes;
  return out.dump(2) + "\n";
}

PlanFile plan_file_from_json(const std::string& text, const std::string& origin) {
  const JsonReader r(origin);
  const json root = r.parse_object(text);
  PlanFile plan;
  read_header(r, root, &plan);
  read_clusters_and_rings(r, root, &plan);
  read_parameter_server(r, root, &plan);
  return plan;
}

PlanFile load_plan_file(const std::string& path) {
  return plan_file_from_json(base::read_file(path), path);
}

}  // namespace ravnest::config
