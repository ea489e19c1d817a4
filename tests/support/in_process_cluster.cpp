#include "tests/support/in_process_cluster.h"

#include <filesystem>

#include "libs/base/sha256.h"
#include "libs/worker/job_setup.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_builder.h"
#include "libs/graph/stage_writer.h"
#include "tests/support/local_port.h"
#include "tests/support/plans.h"

namespace ravnest::test {

namespace fs = std::filesystem;

InProcessCluster::InProcessCluster(const ModelFiles& files, const std::vector<size_t>& cuts) {
  auto model = graph::ModelGraph::load(files.model);
  planner::PoolPlan plan;
  plan.clusters.push_back(cluster_with_cuts(cuts, model->units().size()));
  std::vector<config::NodeConfig> pool;
  for (const auto& stage : plan.clusters[0].stages) {
    pool.push_back(loopback_node(stage.node_id, 19000 + stage.node_id));
  }
  const fs::path plan_dir = dir_ / "plan";
  const auto nodes =
      graph::write_plan(*model, plan, pool, {files.model, 0, files.example_inputs}, plan_dir);
  for (const auto& node : nodes) {
    auto store = std::make_unique<store::NodeStore>(dir_ / node.name, node.name);
    const std::string stage = read_text(plan_dir / node.stage_file);
    store->store_stage(read_text(plan_dir / "nodes" / (node.name + ".json")), stage,
                       base::sha256_hex(stage));
    fs::copy_file(files.train_file, store->dataset_dir() / fs::path(files.train_file).filename());
    stores_.push_back(std::move(store));
    metadata_.push_back(node);
  }
}

InProcessCluster::Trained InProcessCluster::train(
    const config::JobSpec& job, const std::function<void(worker::WorkerSetup&)>& tamper) {
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
    const auto& worker = port.worker(node.node_id);
    for (auto& [name, tensor] : graph::named_state(worker.stage())) {
      out.state.emplace(name, tensor.detach().clone());
    }
    out.records[node.node_id] = worker.backward_records();
    out.most_versions_kept[node.node_id] = worker.most_versions_kept();
  }
  for (const auto& e : port.events()) {
    if (e.data.kind == worker::EventKind::kStep) out.losses.push_back(e.data.loss);
  }
  return out;
}

}  // namespace ravnest::test
