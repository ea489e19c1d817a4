#include "tests/support/local_cluster.h"


#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "libs/base/secret.h"
#include "libs/graph/fuse.h"
#include "libs/graph/cut_model.h"
#include "libs/graph/stage_writer.h"
#include "libs/requester/requester.h"
#include "tests/support/digits.h"
#include "tests/support/plans.h"


namespace ravnest::test {

namespace fs = std::filesystem;

namespace {
const int kHostsPort = 18500;  // every host has its ports to itself
// What rings/media/ring_opener.cpp logs when a ring's segments go through shared memory.
const char kSharedMemoryLine[] = "segments through shared memory";
}  // namespace

std::vector<size_t> LocalCluster::even_cuts(const std::string& model_path, int stages) {
  auto model = graph::load_cut_model(model_path);
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model->cut_allowed().size(); ++i) {
    if (model->cut_allowed()[i]) allowed.push_back(i);
  }
  std::vector<size_t> cuts;
  for (int k = 1; k < stages; ++k) cuts.push_back(allowed.at(k * allowed.size() / stages));
  return cuts;
}

LocalCluster::LocalCluster(const std::string& model_path,
                           const std::vector<std::vector<size_t>>& clusters,
                           const std::vector<std::string>& example_inputs, int spares)
    : model_path_(model_path), example_inputs_(example_inputs),
      clusters_(static_cast<int>(clusters.size())) {
  auto model = graph::load_cut_model(model_path);
  if (hosts_mode_requested()) {
    size_t total = static_cast<size_t>(spares);
    for (const auto& cuts : clusters) total += cuts.size() + 1;
    hosts_ = std::make_unique<local::NamespaceHosts>(local::unique_hosts_name("rnt"),
                                                     static_cast<int>(total));
  }
  // Node k's pool entry: a free loopback port, or host k's address and the hosts' fixed port.
  auto pool_node = [&](int id) {
    if (!hosts_) return loopback_node(id, local::free_loopback_port());
    auto node = loopback_node(id, kHostsPort);
    node.host = hosts_->address(static_cast<size_t>(id));
    node.address = node.host + ":" + std::to_string(node.port);
    return node;
  };
  planner::PoolPlan plan;
  std::vector<config::NodeConfig> pool;
  int next_id = 0;
  for (size_t c = 0; c < clusters.size(); ++c) {
    auto cluster = cluster_with_cuts(clusters[c], model->unit_count(), next_id,
                                     static_cast<int>(c));
    for (const auto& stage : cluster.stages) {
      pool.push_back(pool_node(stage.node_id));
      ports_.push_back(pool.back().port);
    }
    next_id += static_cast<int>(cluster.stages.size());
    plan.clusters.push_back(cluster);
  }
  graph::write_plan(*model, plan, pool, {model_path, 0, example_inputs}, plan_dir());
  for (int s = 0; s < spares; ++s) {
    pool.push_back(pool_node(next_id + s));
    ports_.push_back(pool.back().port);
  }
  pool_ = pool;
  nlohmann::json pool_json = nlohmann::json::object();
  for (const auto& node : pool) {
    pool_json[std::to_string(node.id)] = {
        {"IP", node.address}, {"benchmarks", {{"ram", 8}, {"bandwidth", 1000}}}};
  }
  write_text(pool_file(), pool_json.dump(2) + "\n");
  write_text(dir_ / "secret", "test-secret-" + std::to_string(::getpid()) + "\n");
  fs::permissions(dir_ / "secret", fs::perms::owner_read | fs::perms::owner_write);
  std::vector<std::string> names;
  for (size_t i = 0; i < ports_.size(); ++i) names.push_back("node_" + std::to_string(i));
  daemons_ = std::make_unique<local::LocalDaemons>(binary_dir() + "/apps/ravnestd/ravnestd",
                                                     dir_.path().string(), secret_file(), names,
                                                     ports_);
  // One intra-op thread per daemon, as every test process computes its references with
  // (OMP_NUM_THREADS=1, tests/CMakeLists.txt): LibTorch 2.x's oneDNN convolutions and
  // multi-threaded reductions sum in an order that depends on the thread count, and weights are
  // compared bit for bit with one process.
  for (size_t i = 0; i < names.size(); ++i) daemons_->set_flags(i, {"--threads", "1"});
  if (hosts_) {
    std::vector<std::string> namespaces, addresses;
    for (size_t i = 0; i < names.size(); ++i) {
      namespaces.push_back(hosts_->namespace_of(i));
      addresses.push_back(hosts_->address(i));
    }
    daemons_->set_hosts(namespaces, addresses, kHostsPort);
  }
}

bool LocalCluster::hosts_mode_requested() {
  const char* value = std::getenv("RAVNEST_TEST_HOSTS");
  return value && std::string(value) == "1";
}

int LocalCluster::shared_memory_lines() const {
  int lines = 0;
  for (int node = 0; node < nodes(); ++node) {
    const std::string text = log(node);
    for (size_t at = text.find(kSharedMemoryLine); at != std::string::npos;
         at = text.find(kSharedMemoryLine, at + 1)) {
      ++lines;
    }
  }
  return lines;
}

LocalCluster::~LocalCluster() = default;

void LocalCluster::recut(const std::vector<size_t>& cuts) {
  if (clusters_ != 1 || cuts.size() + 1 != pool_.size()) {
    throw std::logic_error("LocalCluster::recut: a plan of one cluster of " +
                           std::to_string(cuts.size() + 1) + " nodes and no spares only");
  }
  auto model = graph::load_cut_model(model_path_);
  planner::PoolPlan plan;
  plan.clusters.push_back(cluster_with_cuts(cuts, model->unit_count(), 0, 0));
  fs::remove_all(plan_dir());
  graph::write_plan(*model, plan, pool_, {model_path_, 0, example_inputs_}, plan_dir());
}

requester::Requester LocalCluster::requester() const {
  return requester::Requester(requester::load_plan(plan_dir()), base::read_secret(secret_file()),
                              insecure_);
}

void LocalCluster::push() const { requester().push([](const std::string&) {}); }

CommandResult LocalCluster::ravnest(const std::string& subcommand, const std::string& args,
                                    int timeout_seconds) const {
  return run_command("cd " + dir_.path().string() + " && " + binary_dir() +
                         "/apps/ravnest/ravnest " + subcommand + " " + args + " --plan " +
                         plan_dir() + " --secret-file " + secret_file() +
                         (insecure_ ? " --insecure" : ""),
                     timeout_seconds);
}

bool LocalCluster::wait_for_batches(int node, uint64_t batches, double limit_seconds) const {
  auto requester = this->requester();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(limit_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& report : requester.status()) {
      if (report.node.node_id == node && report.status.batches >= batches) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void LocalCluster::train_and_fuse(const std::string& job_path, const std::string& out_dir,
                                  int cluster) const {
  auto requester = this->requester();
  requester.train(job_path, {});
  std::vector<graph::StageFile> stages;
  const auto fetched_dir = dir_ / ("fetched_" + std::to_string(cluster));
  std::filesystem::create_directories(fetched_dir);
  for (auto& fetched : requester.fetch_cluster(cluster, fetched_dir.string())) {
    graph::StageFile file;
    file.metadata = std::move(fetched.metadata);
    file.path = fetched.path;
    stages.push_back(std::move(file));
  }
  graph::fuse_stages(model_path_, stages, out_dir);
}

void LocalCluster::set_daemon_config(const std::string& toml) {
  const auto path = dir_ / "ravnestd.toml";
  write_text(path, toml);
  daemons_->set_config_file(path.string());
}

std::map<std::string, at::Tensor> LocalCluster::fused(int cluster, const std::string& tag) const {
  const auto out = dir() / (tag + "_" + std::to_string(cluster));
  auto fuse = ravnest("fuse", "--cluster " + std::to_string(cluster) + " --out " + out.string());
  if (fuse.exit_code != 0) {
    throw std::runtime_error("ravnest fuse --cluster " + std::to_string(cluster) + " failed: " +
                             fuse.out + fuse.err);
  }
  return load_state_dict(out / "trained_state_dict.pt");
}

LocalCluster::Outcome LocalCluster::fuse_all(int clusters, int leaf, const std::string& tag) const {
  Outcome outcome;
  for (int c = 0; c < clusters; ++c) outcome.clusters.push_back(fused(c, tag));
  const auto fetched = requester().fetch_losses(leaf);
  outcome.losses = fetched.losses;
  outcome.validation = fetched.validation;
  return outcome;
}

}  // namespace ravnest::test
