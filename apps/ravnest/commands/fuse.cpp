// ravnest fuse --cluster N: collect a cluster's trained stages (or a parameter-server plan's
// shards) into a state dict that load_state_dict(strict=True) takes, and the model.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/graph/fuse.h"

namespace ravnest::cli {
namespace {

std::string model_of_plan(const std::string& plan_dir) {
  const std::string plan_file = config::PlanLayout(plan_dir).plan_file();
  std::ifstream in(plan_file);
  if (!in) throw std::runtime_error(plan_file + ": cannot read");
  return nlohmann::json::parse(in).at("model").get<std::string>();
}

// A directory removed with everything in it when this goes (fused or failed).
struct RemovedDir {
  std::string path;
  ~RemovedDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

struct FuseCommand {
  Connection connection;
  int cluster = 0;
  std::string from, model, out = "trained";
  bool allow_unfinished = false;

  int run();
  std::vector<graph::StageFile> fetch_stages(RemovedDir& dir);
};

// The stages of the cluster (or the servers' shards), checked finished, then fetched from the
// daemons into a directory made beside the output as `dir`.
std::vector<graph::StageFile> FuseCommand::fetch_stages(RemovedDir& fetched_dir) {
  auto requester = connection.open();
  // A parameter-server plan's trained model is on its servers, whatever the cluster.
  const auto servers = requester.servers();
  if (!allow_unfinished) {
    if (servers.empty()) {
      requester.check_finished(cluster);
    } else {
      requester.check_finished(servers);
    }
  }
  // A hybrid plan's tables are on its servers, the rest on the cluster's trainer.
  const bool hybrid = !servers.empty() && servers.front().parameter_server.hybrid();
  if (hybrid && !allow_unfinished) requester.check_finished(cluster);
  // The stages stream into files of a temporary directory beside the output (a stage of GB
  // is never held in memory twice), removed once fused or failed.
  fetched_dir.path = (std::filesystem::path(out) / (".fetched." + std::to_string(::getpid())))
                         .string();
  std::filesystem::create_directories(fetched_dir.path);
  const std::string& dir = fetched_dir.path;
  auto fetched_nodes = servers.empty() ? requester.fetch_cluster(cluster, dir)
                                       : requester.fetch_nodes(servers, dir);
  if (hybrid) {
    for (auto& trainer : requester.fetch_cluster(cluster, dir)) {
      fetched_nodes.push_back(std::move(trainer));
    }
  }
  std::vector<graph::StageFile> stages;
  for (auto& fetched : fetched_nodes) {
    graph::StageFile file;
    file.metadata = std::move(fetched.metadata);
    file.path = fetched.path;
    say("fetched the stage of " + file.metadata.name + " (" + std::to_string(fetched.bytes) +
        " bytes)");
    stages.push_back(std::move(file));
  }
  if (!servers.empty()) stages = graph::server_shards(std::move(stages));
  return stages;
}

int FuseCommand::run() {
  std::vector<graph::StageFile> stages;
  RemovedDir fetched_dir;
  if (!from.empty()) {
    stages = graph::cluster_stage_files(from, cluster);
    if (model.empty()) model = model_of_plan(from);
  } else {
    if (model.empty()) model = model_of_plan(connection.plan_dir);
    stages = fetch_stages(fetched_dir);
  }
  auto result = graph::fuse_stages(model, stages, out);
  say("wrote " + result.state_dict_path + " (" + std::to_string(result.tensors) +
      " tensors) and " + result.model_path);
  return 0;
}

}  // namespace

Command add_fuse(CLI::App& app) {
  auto c = std::make_shared<FuseCommand>();
  auto* cmd = app.add_subcommand(
      "fuse", "Collect a cluster's trained stages into trained/trained_state_dict.pt and "
              "trained/model.pt");
  cmd->add_option("--cluster", c->cluster, "cluster id")->capture_default_str();
  cmd->add_option("--from", c->from, "a local plan directory instead of the daemons");
  cmd->add_option("--model", c->model, "the original model (default: the plan's)");
  cmd->add_option("--out", c->out, "output directory")->capture_default_str();
  cmd->add_flag("--allow-unfinished", c->allow_unfinished,
                "fuse the weights as they are when the last job did not finish on every node");
  add_connection_options(cmd, c->connection);
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
