#include "bench/even_pipeline.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "libs/local/local_daemons.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_writer.h"

namespace ravnest::bench {

namespace fs = std::filesystem;

requester::TrainResult train_even_pipeline(const fs::path& dir, const std::string& model_path,
                                         int stages, const std::string& job_path, bool insecure,
                                         const requester::TrainOptions& options,
                                         std::string* leaf_losses,
                                         std::vector<wire::NodeStatusData>* statuses,
                                         const std::vector<std::string>& daemon_flags) {
  auto model = graph::ModelGraph::load(model_path);
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model->cut_allowed().size(); ++i) {
    if (model->cut_allowed(i)) allowed.push_back(i);
  }
  planner::PoolPlan plan;
  planner::ClusterPlan cluster;
  std::vector<config::NodeConfig> pool;
  size_t first = 0;
  for (int s = 0; s < stages; ++s) {
    config::NodeConfig node;
    node.id = s;
    node.name = "node_" + std::to_string(s);
    node.host = "127.0.0.1";
    node.port = local::free_loopback_port();
    node.address = "127.0.0.1:" + std::to_string(node.port);
    node.ram_gb = 8;
    node.bandwidth_mbps = 1000;
    pool.push_back(node);
    planner::StagePlan stage;
    stage.node_id = s;
    stage.first_unit = first;
    stage.end_unit = s + 1 < stages ? allowed[(s + 1) * allowed.size() / stages] + 1
                                    : model->units().size();
    first = stage.end_unit;
    cluster.stages.push_back(stage);
  }
  plan.clusters.push_back(cluster);
  fs::remove_all(dir);
  fs::create_directories(dir);
  graph::write_plan(*model, plan, pool, {model_path, 0, {}}, (dir / "plan").string());
  std::vector<std::string> names;
  std::vector<int> ports;
  for (const auto& node : pool) {
    names.push_back(node.name);
    ports.push_back(node.port);
  }
  local::LocalDaemons daemons(local::sibling_ravnestd(), dir.string(), "", names, ports);
  daemons.set_insecure(insecure);
  for (size_t i = 0; i < names.size(); ++i) daemons.set_flags(i, daemon_flags);
  daemons.start_all();
  requester::Requester requester(requester::load_plan((dir / "plan").string()), "", insecure);
  requester.push([](const std::string&) {});
  auto result = requester.train(job_path, options);
  if (statuses) {
    for (const auto& report : requester.status()) statuses->push_back(report.status);
  }
  if (leaf_losses) {
    std::ifstream in(fs::path(daemons.data_dir(names.size() - 1)) / "losses.txt");
    std::stringstream text;
    text << in.rdbuf();
    *leaf_losses = text.str();
  }
  return result;
}

}  // namespace ravnest::bench
