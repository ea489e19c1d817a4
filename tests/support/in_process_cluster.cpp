#include "tests/support/in_process_cluster.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "libs/base/sha256.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/torch_support/module_file.h"
#include "libs/worker/job_setup.h"
#include "libs/graph/cut_model.h"
#include "libs/graph/stage_builder.h"
#include "libs/graph/stage_writer.h"
#include "tests/support/local_port.h"
#include "tests/support/plans.h"

namespace ravnest::test {

namespace fs = std::filesystem;

namespace {

// Stores `node`'s stage from `plan_dir` as a push does.
std::unique_ptr<store::NodeStore> store_node(const fs::path& dir, const fs::path& plan_dir,
                                             const config::NodeMetadata& node) {
  auto store = std::make_unique<store::NodeStore>(dir / node.name, node.name);
  const std::string stage = read_text(plan_dir / node.stage_file);
  store->store_stage(read_text(plan_dir / "nodes" / (node.name + ".json")), stage,
                     base::sha256_hex(stage));
  return store;
}

}  // namespace

InProcessCluster::InProcessCluster(const ModelFiles& files, const std::vector<size_t>& cuts) {
  auto model = graph::load_cut_model(files.model);  // TorchScript or a .pt2
  planner::PoolPlan plan;
  plan.clusters.push_back(cluster_with_cuts(cuts, model->unit_count()));
  std::vector<config::NodeConfig> pool;
  for (const auto& stage : plan.clusters[0].stages) {
    pool.push_back(loopback_node(stage.node_id, 19000 + stage.node_id));
  }
  const fs::path plan_dir = dir_ / "plan";
  const auto nodes =
      graph::write_plan(*model, plan, pool, {files.model, 0, files.example_inputs}, plan_dir);
  for (const auto& node : nodes) {
    auto store = store_node(dir_.path(), plan_dir, node);
    fs::copy_file(files.train_file, store->dataset_dir() / fs::path(files.train_file).filename());
    stores_.push_back(std::move(store));
    metadata_.push_back(node);
  }
}

std::string InProcessCluster::plan_dir() const { return (dir_ / "plan").string(); }

InProcessCluster::Trained InProcessCluster::train(
    const config::JobSpec& job, const std::function<void(worker::JobSetup&)>& tamper) {
  LocalPort port;
  for (const auto& store : stores_) {
    auto setup = worker::make_worker_setup(*store, job, /*job_id=*/1);
    if (tamper) tamper(*setup);
    port.add(std::move(*setup));
  }
  port.run();
  Trained out;
  out.rings = port.rings_run();
  for (const auto& node : metadata_) {
    const auto& worker = port.stage_worker(node.node_id);
    for (auto& named : worker.stage().named_parameters()) {
      out.state.emplace(named.name, named.value.detach().clone());
    }
    for (auto& named : worker.stage().named_buffers()) {
      out.state.emplace(named.name, named.value.detach().clone());
    }
    out.records[node.node_id] = worker.backward_records();
    out.most_versions_kept[node.node_id] = worker.most_versions_kept();
  }
  for (const auto& e : port.events()) {
    if (e.data.kind == worker::EventKind::kStep) out.losses.push_back(e.data.loss);
    if (e.data.kind == worker::EventKind::kValidation) out.validations.push_back(e.data);
  }
  return out;
}

InProcessPlan::InProcessPlan(
    int nodes,
    const std::function<void(const std::string&, const std::string&)>& clusterize) {
  nlohmann::json pool = nlohmann::json::object();
  for (int id = 0; id < nodes; ++id) {
    pool[std::to_string(id)] = {{"IP", "127.0.0.1:" + std::to_string(19000 + id)},
                                {"benchmarks", {{"ram", 8}, {"bandwidth", 1000}}}};
  }
  const fs::path pool_file = dir_ / "pool.json";
  write_text(pool_file, pool.dump(2) + "\n");
  const fs::path plan_dir = dir_ / "plan";
  clusterize(pool_file.string(), plan_dir.string());
  const config::PlanLayout layout(plan_dir.string());
  for (int id = 0; id < nodes; ++id) {
    if (!fs::exists(layout.node_file(id))) continue;  // not in the plan
    auto node = config::load_node_metadata(layout.node_file(id));
    stores_.push_back(store_node(dir_.path(), plan_dir, node));
    metadata_.push_back(std::move(node));
  }
}

InProcessPlan::Trained InProcessPlan::train(const config::JobSpec& job) {
  LocalPort port;
  for (const auto& store : stores_) port.add(std::move(*worker::make_worker_setup(*store, job, 1)));
  port.run();
  Trained out;
  for (size_t i = 0; i < stores_.size(); ++i) {
    if (!fs::exists(stores_[i]->trained_path())) continue;  // an evaluator trains nothing
    auto& stage = out.stages[metadata_[i].node_id];
    const auto module = torch_support::load_module(stores_[i]->trained_path().string());
    for (auto& [name, tensor] : graph::named_state(module)) {
      if (tensor.numel() > 0) stage.emplace(name, tensor.detach().clone());
    }
  }
  for (const auto& e : port.events()) out.events.push_back(e.data);
  return out;
}

}  // namespace ravnest::test
