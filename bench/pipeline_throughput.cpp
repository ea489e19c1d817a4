// Samples/s of the digits demo trained by 1, 2 and 3 local daemons (one pipeline), next to
// single-process LibTorch training of the same model and job measured in the same run; each
// pipeline over TLS (as always) and over plain TCP (--insecure), to show what TLS costs.
//   bench_pipeline_throughput WORK_DIR [STAGES...]
// WORK_DIR holds small_cnn.pt, the digits CSVs and job.toml (bench/pipeline_throughput.sh
// makes them). Prints figures; asserts nothing.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/harness/local_daemons.h"
#include "libs/config/job_spec.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/stage_writer.h"
#include "libs/requester/requester.h"
#include "libs/training/reference_trainer.h"

namespace fs = std::filesystem;
using namespace ravnest;

static double train_on_daemons(const fs::path& work, const std::string& model_path, int stages,
                               bool insecure) {
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
    node.port = runtime::free_loopback_port();
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
  const fs::path dir = work / ("bench_" + std::to_string(stages));
  fs::remove_all(dir);
  fs::create_directories(dir);
  graph::write_plan(*model, plan, pool, {model_path, 0, {}}, (dir / "plan").string());
  std::vector<std::string> names;
  std::vector<int> ports;
  for (const auto& node : pool) {
    names.push_back(node.name);
    ports.push_back(node.port);
  }
  runtime::LocalDaemons daemons(runtime::sibling_ravnestd(), dir.string(), "", names, ports);
  daemons.set_insecure(insecure);
  daemons.start_all();
  runtime::Requester requester(runtime::load_plan((dir / "plan").string()), "", insecure);
  requester.push([](const std::string&) {});
  runtime::TrainOptions options;
  auto result = requester.train((work / "job.toml").string(), options);
  return result.clusters.at(0).samples_per_second;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s WORK_DIR [STAGES...]\n", argv[0]);
    return 2;
  }
  const fs::path work = argv[1];
  std::vector<int> stages;
  for (int i = 2; i < argc; ++i) stages.push_back(std::stoi(argv[i]));
  if (stages.empty()) stages = {1, 2, 3};
  const std::string model_path = (work / "small_cnn.pt").string();
  try {
    const auto job = config::load_job((work / "job.toml").string());
    const auto reference = runtime::train_reference(model_path, job);
    std::printf("single-process LibTorch     %9.0f samples/s\n", reference.samples_per_second);
    for (int k : stages) {
      const double rate = train_on_daemons(work, model_path, k, false);
      std::printf("%d stage(s) on local daemons %9.0f samples/s  (%.2fx single-process)\n", k,
                  rate, rate / reference.samples_per_second);
      const double plain = train_on_daemons(work, model_path, k, true);
      std::printf("  the same over plain TCP   %9.0f samples/s  (TLS/plain %.2fx)\n", plain,
                  rate / plain);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
