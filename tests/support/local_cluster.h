// LocalCluster: real ravnestd processes on 127.0.0.1 for integration tests. Writes a plan for a
// model with chosen cut points (one cluster per entry of `clusters`), starts one daemon per node
// on a free port with its own data directory and a shared secret, and always stops them: SIGTERM,
// then SIGKILL after a few seconds. Every command it runs is bounded in time.
//
// The hosts mode (RAVNEST_TEST_HOSTS=1 in the environment, set by the ctest entries *_hosts):
// each daemon runs in a network namespace of its own on one bridge (local::NamespaceHosts, named
// rnt<pid><letter>), listens on that host's address, and the pool says so: segments go over TCP
// as between machines. The namespaces are torn down with the cluster (after its daemons). Where
// namespaces cannot be made the constructor throws local::HostsUnavailable (the ctest entries
// check first, and report a skip: tests/integration/hosts_gate.sh).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/pool/node_pool.h"
#include "libs/local/local_daemons.h"
#include "libs/local/namespace_hosts.h"
#include "tests/support/test_env.h"

namespace ravnest::requester {
class Requester;
}  // namespace ravnest::requester

namespace ravnest::test {

class LocalCluster {
 public:
  // `clusters[c]` lists the cut points (unit indices a stage ends after) of cluster c; an empty
  // list is a one-node cluster. Nodes are numbered in cluster order; `spares` more nodes follow,
  // with daemons of their own, in the pool (pool_file()) but not in the plan.
  LocalCluster(const std::string& model_path, const std::vector<std::vector<size_t>>& clusters,
               const std::vector<std::string>& example_inputs, int spares = 0);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::filesystem::path& dir() const { return dir_.path(); }
  std::string plan_dir() const { return (dir_ / "plan").string(); }
  std::string secret_file() const { return (dir_ / "secret").string(); }
  std::string pool_file() const { return (dir_ / "node_configs.json").string(); }
  int nodes() const { return static_cast<int>(ports_.size()); }  // spares included
  int port(int node) const { return ports_.at(node); }
  // Node's address as the pool gives it ("127.0.0.1:PORT", or its host's in the hosts mode).
  std::string address(int node) const { return daemons_->address(node); }
  bool hosts() const { return hosts_ != nullptr; }
  // True when the environment asks for the hosts mode (RAVNEST_TEST_HOSTS=1).
  static bool hosts_mode_requested();
  // The daemons' logs' lines saying a ring's segments go through shared memory (ring_opener.cpp):
  // none may appear in the hosts mode, where only TCP joins the daemons.
  int shared_memory_lines() const;
  std::filesystem::path data_dir(int node) const { return daemons_->data_dir(node); }
  std::string log(int node) const { return read_text(daemons_->log_path(node)); }
  std::filesystem::path log_path(int node) const { return daemons_->log_path(node); }

  // Daemons started from now on read this ravnestd.toml (written in the cluster's directory).
  void set_daemon_config(const std::string& toml);
  // Daemon `node`, started from now on, gets these flags too (after --threads 1, which every
  // daemon of a local cluster gets; see the constructor).
  void set_daemon_flags(int node, std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--threads", "1"});
    daemons_->set_flags(static_cast<size_t>(node), std::move(flags));
  }
  // Daemons started from now on, and ravnest(), run with --insecure (plain TCP, no TLS).
  void set_insecure(bool insecure) {
    insecure_ = insecure;
    daemons_->set_insecure(insecure);
  }
  bool insecure() const { return insecure_; }

  void start(int node) { daemons_->start(node); }  // waits until it accepts connections
  void start_all() { daemons_->start_all(); }
  void kill(int node, int signal) { daemons_->signal(node, signal); }
  pid_t pid(int node) const { return daemons_->pid(node); }
  bool running(int node) { return daemons_->running(node); }
  int wait_exit(int node, double seconds) { return daemons_->wait_exit(node, seconds); }

  // A plan of one cluster (no spares) cut at `cuts` instead, into as many stages as before: the
  // plan directory is written again, for the same nodes and ports; the daemons run on, holding
  // what they held (push() then ships the new stages). Throws std::logic_error otherwise.
  void recut(const std::vector<size_t>& cuts);

  // What `ravnest push` does, in this process (libs/requester): every node of the plan gets its
  // stage. Throws std::runtime_error naming the node that refused. (The CLI itself is tested in
  // test_pipeline_training.)
  void push() const;

  // `ravnest SUBCOMMAND ARGS --plan P --secret-file S [--insecure]`, from the cluster's directory.
  CommandResult ravnest(const std::string& subcommand, const std::string& args = "",
                        int timeout_seconds = 300) const;

  // What `ravnest train JOB` then `ravnest fuse --cluster C --out OUT` do, in this process, through
  // the libraries the CLI calls (libs/requester, graph::fuse_stages): the same daemons and wire,
  // without two starts of LibTorch per run. Throws std::runtime_error with the CLI's message.
  void train_and_fuse(const std::string& job_path, const std::string& out_dir,
                      int cluster = 0) const;

  // Waits until `node` reports at least `batches` training batches done (through its status, in
  // this process); false after `limit_seconds`.
  bool wait_for_batches(int node, uint64_t batches, double limit_seconds = 60) const;

  // `ravnest fuse --cluster C --out dir()/TAG_C`: the fused state dict of cluster `cluster`.
  // Throws std::runtime_error with fuse's output when it fails.
  std::map<std::string, at::Tensor> fused(int cluster, const std::string& tag = "trained") const;

  // What a job left, for comparing runs: `ravnest fuse` of each of the first `clusters` clusters
  // (into dir()/TAG_C), and the losses and validation.txt of node `leaf` (the leaf of cluster 0).
  // Throws std::runtime_error with fuse's output when it fails.
  struct Outcome {
    std::vector<std::map<std::string, at::Tensor>> clusters;  // fused state dict of each
    std::string losses;
    std::string validation;
  };
  Outcome fuse_all(int clusters, int leaf, const std::string& tag) const;

  // Units of the model, for choosing cuts: the allowed boundaries spread evenly.
  static std::vector<size_t> even_cuts(const std::string& model_path, int stages);

 private:
  // A requester on the plan directory as it is now, with the cluster's secret (and --insecure
  // where set_insecure asked for it), as `ravnest` is given them.
  requester::Requester requester() const;

  TempDir dir_;
  std::string model_path_;
  std::vector<std::string> example_inputs_;
  std::vector<config::NodeConfig> pool_;  // the pool file's nodes, spares last
  int clusters_ = 0;
  std::vector<int> ports_;
  std::unique_ptr<local::NamespaceHosts> hosts_;  // before daemons_: outlives them
  std::unique_ptr<local::LocalDaemons> daemons_;
  bool insecure_ = false;
};

}  // namespace ravnest::test
