#include "tests/support/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "libs/graph/model_graph.h"
#include "libs/graph/stage_writer.h"

extern char** environ;

namespace ravnest::test {

namespace fs = std::filesystem;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

static bool accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

std::vector<size_t> LocalCluster::even_cuts(const std::string& model_path, int stages) {
  auto model = graph::ModelGraph::load(model_path);
  std::vector<size_t> allowed;
  for (size_t i = 0; i < model->cut_allowed().size(); ++i) {
    if (model->cut_allowed(i)) allowed.push_back(i);
  }
  std::vector<size_t> cuts;
  for (int k = 1; k < stages; ++k) cuts.push_back(allowed.at(k * allowed.size() / stages));
  return cuts;
}

LocalCluster::LocalCluster(const std::string& model_path,
                           const std::vector<std::vector<size_t>>& clusters,
                           const std::vector<std::string>& example_inputs) {
  auto model = graph::ModelGraph::load(model_path);
  planner::PoolPlan plan;
  std::vector<config::NodeConfig> pool;
  int next_id = 0;
  for (size_t c = 0; c < clusters.size(); ++c) {
    planner::ClusterPlan cluster;
    cluster.id = static_cast<int>(c);
    size_t first = 0;
    for (size_t s = 0; s <= clusters[c].size(); ++s) {
      config::NodeConfig node;
      node.id = next_id++;
      node.name = "node_" + std::to_string(node.id);
      node.host = "127.0.0.1";
      node.port = free_port();
      node.address = node.host + ":" + std::to_string(node.port);
      node.ram_gb = 8;
      node.bandwidth_mbps = 1000;
      pool.push_back(node);
      ports_.push_back(node.port);
      planner::StagePlan stage;
      stage.node_id = node.id;
      stage.first_unit = first;
      stage.end_unit = s < clusters[c].size() ? clusters[c][s] + 1 : model->units().size();
      first = stage.end_unit;
      cluster.stages.push_back(stage);
    }
    plan.clusters.push_back(cluster);
  }
  graph::write_plan(*model, plan, pool, {model_path, 0, example_inputs}, plan_dir());
  write_text(dir_ / "secret", "test-secret-" + std::to_string(::getpid()) + "\n");
  fs::permissions(dir_ / "secret", fs::perms::owner_read | fs::perms::owner_write);
  pids_.assign(ports_.size(), -1);
}

LocalCluster::~LocalCluster() {
  for (int node = 0; node < nodes(); ++node) {
    if (pids_[node] > 0) ::kill(pids_[node], SIGTERM);
  }
  for (int node = 0; node < nodes(); ++node) {
    if (pids_[node] > 0 && wait_exit(node, 5) == -1) {
      ::kill(pids_[node], SIGKILL);
      ::waitpid(pids_[node], nullptr, 0);
    }
  }
}

fs::path LocalCluster::data_dir(int node) const {
  return dir_ / ("data_" + std::to_string(node));
}

std::string LocalCluster::log(int node) const {
  return read_text(dir_ / ("daemon_" + std::to_string(node) + ".log"));
}

void LocalCluster::start(int node) {
  const std::string binary = binary_dir() + "/apps/ravnestd/ravnestd";
  const std::string log_path = (dir_ / ("daemon_" + std::to_string(node) + ".log")).string();
  std::vector<std::string> args = {binary,
                                   "--node",
                                   "node_" + std::to_string(node),
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(ports_[node]),
                                   "--data-dir",
                                   data_dir(node).string(),
                                   "--secret-file",
                                   secret_file(),
                                   "--log-file",
                                   log_path,
                                   "--log-level",
                                   "debug"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (log_path + ".out").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + binary);
  pids_[node] = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!accepts(ports_[node])) {
    if (!running(node)) {
      throw std::runtime_error("ravnestd node_" + std::to_string(node) + " exited: " +
                               read_text(log_path + ".out") + log(node));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("ravnestd node_" + std::to_string(node) + " does not listen");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void LocalCluster::start_all() {
  for (int node = 0; node < nodes(); ++node) start(node);
}

void LocalCluster::kill(int node, int signal) {
  if (pids_[node] > 0) ::kill(pids_[node], signal);
}

bool LocalCluster::running(int node) {
  if (pids_[node] <= 0) return false;
  int status = 0;
  pid_t r = ::waitpid(pids_[node], &status, WNOHANG);
  if (r == 0) return true;
  pids_[node] = -1;
  return false;
}

int LocalCluster::wait_exit(int node, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t r = ::waitpid(pids_[node], &status, WNOHANG);
    if (r == pids_[node]) {
      pids_[node] = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

CommandResult LocalCluster::ravnest(const std::string& subcommand, const std::string& args,
                                    int timeout_seconds) const {
  return run_command("cd " + dir_.path().string() + " && " + binary_dir() +
                         "/apps/ravnest/ravnest " + subcommand + " " + args + " --plan " +
                         plan_dir() + " --secret-file " + secret_file(),
                     timeout_seconds);
}

}  // namespace ravnest::test
