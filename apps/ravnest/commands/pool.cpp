// ravnest pool add NAME --ip HOST:PORT --ram GB --bandwidth MBPS [--gpu-memory GB] and
// ravnest pool remove NAME: change node_data/node_configs.json (JSON or TOML, written
// atomically) and, when a plan exists, replan only what the change touches
// (libs/config/pool/pool_change.h, docs/planner.md#pools-that-change); --replan plans anew.
// The pool's and the plan's directories are locked for the edit (base::EditLock), so that edits
// at the same moment all count.
// No daemon is asked: `ravnest push` sends what changed.
// ravnest pool --tracker HOST:PORT: node_configs.json written from a tracker's live pool
// (tracker_pool.h, docs/tracker.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/commands/tracker_pool.h"
#include "apps/ravnest/memory_probe_process.h"
#include "libs/base/atomic_file.h"
#include "libs/base/edit_lock.h"
#include "libs/config/plan/node_replacement.h"
#include "libs/config/plan/plan_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/config/pool/pool_change.h"
#include "libs/config/pool/pool_edit.h"
#include "libs/graph/clusterize.h"
#include "libs/planner/cluster_plan.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/replacement.h"
#include "libs/requester/requester.h"

namespace ravnest::cli {
namespace {

namespace fs = std::filesystem;

bool is_toml(const std::string& path) { return fs::path(path).extension() == ".toml"; }

struct PoolCommand {
  std::string nodes_path = "node_data/node_configs.json";
  std::string plan_dir = "node_data";
  std::string name;
  config::NewPoolNode node;
  double gpu_memory_gb = 0;
  bool replan = false;
  bool no_memory_probe = false;
  CLI::Option* gpu_memory = nullptr;
  Connection connection;  // remove: its --secret-file and --insecure, to ask the plan's nodes
  std::string tracker;    // --tracker: write nodes_path from this tracker's live pool

  bool has_plan() const { return fs::exists(config::PlanLayout(plan_dir).plan_file()); }
  int add();
  int remove();
  void refuse_if_cluster_runs_a_job(const requester::Plan& plan, int cluster,
                                    const std::string& removed);
  std::vector<std::unique_ptr<base::EditLock>> lock_for_edit() const;
  void full_replan() const;
};

// The pool file's directory and the plan directory (base::EditLock), each once and in one order:
// edits at the same moment (pool add/remove, join) then read what the one before wrote.
std::vector<std::unique_ptr<base::EditLock>> PoolCommand::lock_for_edit() const {
  std::set<fs::path> dirs;
  for (const fs::path dir : {fs::path(nodes_path).parent_path(), fs::path(plan_dir)}) {
    std::error_code ec;
    const fs::path real = fs::canonical(dir.empty() ? fs::path(".") : dir, ec);
    if (!ec) dirs.insert(real);  // a missing plan directory: nothing to lock there
  }
  std::vector<std::unique_ptr<base::EditLock>> locks;
  for (const auto& dir : dirs) locks.push_back(std::make_unique<base::EditLock>(dir));
  return locks;
}

int PoolCommand::add() {
  node.id = config::pool_node_id(name);
  if (gpu_memory->count()) node.gpu_memory_gb = gpu_memory_gb;
  const auto editing = lock_for_edit();
  const std::string text = base::read_file(nodes_path);
  const std::string changed = config::add_pool_node(text, is_toml(nodes_path), nodes_path, node);
  base::write_file_atomically(nodes_path, changed);
  say("added node_" + std::to_string(node.id) + " (" + node.address + ") to " + nodes_path);
  if (!has_plan()) return 0;
  if (replan) {
    full_replan();
    return 0;
  }
  const auto plan = requester::load_plan(plan_dir);
  const auto pool = config::parse_node_pool(changed, nodes_path, is_toml(nodes_path));
  const auto decision = config::decide_added(plan.nodes, pool, planner::memory_margin());
  std::string line = "the plan " + plan_dir + " is unchanged: node_" + std::to_string(node.id) +
                     " is a spare (`ravnest replace` or `ravnest pool remove` can use it)";
  if (decision.like_cluster) {
    std::string ids;
    for (int id : decision.could_form) ids += (ids.empty() ? "" : ", ") + config::node_name(id);
    line += "; the spares " + ids + " could hold another cluster cut like cluster " +
            std::to_string(*decision.like_cluster) + ": `ravnest pool add ... --replan` or "
            "`ravnest clusterize` plans it";
  }
  say(line);
  return 0;
}

int PoolCommand::remove() {
  const int id = config::pool_node_id(name);
  const auto editing = lock_for_edit();
  const std::string text = base::read_file(nodes_path);
  const std::string changed = config::remove_pool_node(text, is_toml(nodes_path), nodes_path, id);
  const std::string removed = config::node_name(id);
  if (!has_plan() || replan) {
    base::write_file_atomically(nodes_path, changed);
    say("removed " + removed + " from " + nodes_path);
    if (replan) full_replan();
    return 0;
  }
  const auto plan = requester::load_plan(plan_dir);
  const auto pool = config::parse_node_pool(changed, nodes_path, is_toml(nodes_path));
  const auto decision = config::decide_removed(plan.nodes, pool, id, planner::memory_margin());
  if (!decision.in_plan) {
    base::write_file_atomically(nodes_path, changed);
    say("removed " + removed + " from " + nodes_path + "; the plan " + plan_dir +
        " did not use it and is unchanged");
    return 0;
  }
  // A planned node of a job that `ravnest train` follows (replace's rule): its cluster trains
  // on it, and would lose it from the plan (fuse and losses could not reach it, and the push
  // that follows would overwrite the trained stages).
  const auto following = requester::read_following(plan_dir);
  if (following && !following->dropped.count(decision.cluster)) {
    throw std::runtime_error(removed + " holds a stage of cluster " +
                             std::to_string(decision.cluster) + ", which trains in job " +
                             std::to_string(following->job_id) + ", followed by `ravnest train` " +
                             "(pid " + std::to_string(following->pid) + "): nothing changed; " +
                             "remove it once the job ended (`ravnest stop` ends it now)");
  }
  if (!following) refuse_if_cluster_runs_a_job(plan, decision.cluster, removed);
  if (!decision.spare) {
    // Nothing written: the pool and the plan stay as they were.
    char need[160];
    std::snprintf(need, sizeof need, "%.2f GB; the largest spare has %.2f GB",
                  decision.need_bytes / 1e9, decision.largest_spare_bytes / 1e9);
    throw std::runtime_error(removed + " holds a stage of cluster " +
                             std::to_string(decision.cluster) + " and no spare can take it (it "
                             "needs " + need + "): `ravnest pool remove " + name +
                             " --replan` plans the pool anew");
  }
  config::NodeConfig spare;
  for (const auto& entry : pool) {
    if (entry.id == *decision.spare) spare = entry;
  }
  std::vector<config::NodeMetadata> nodes = plan.nodes;
  const config::NodeMetadata old = *std::find_if(
      nodes.begin(), nodes.end(), [&](const config::NodeMetadata& n) { return n.node_id == id; });
  const auto touched = config::replace_node(nodes, id, spare);
  // The plan first (it still names only pool nodes after), then the pool without the node.
  requester::write_replacement(plan_dir, nodes, touched, old, spare.id);
  base::write_file_atomically(nodes_path, changed);
  std::string names;
  for (int t : touched) names += (names.empty() ? "" : ", ") + config::node_name(t);
  say("removed " + removed + " from " + nodes_path + "; " + spare.name + " takes its stage in "
      "cluster " + std::to_string(decision.cluster) + " (node files rewritten: " + names +
      "); `ravnest push` sends them");
  return 0;
}

// A job nobody follows (`train --detach`, or its `ravnest train` gone) trains on the cluster too:
// its nodes are asked. One that does not answer runs nothing it could lose (it may be why the
// node goes); one that runs a job keeps the pool and the plan as they are.
void PoolCommand::refuse_if_cluster_runs_a_job(const requester::Plan& plan, int cluster,
                                               const std::string& removed) {
  connection.plan_dir = plan_dir;
  auto requester = connection.open();
  for (const auto& m : plan.cluster(cluster)) {
    wire::NodeStatusData status;
    try {
      status = requester.status_of(m, 5);
    } catch (const std::exception& e) {
      // Refused for its secret: it answered, and would not say.
      const std::string why = e.what();
      if (why.find("secret") != std::string::npos) throw std::runtime_error(explain_refusal(why));
      continue;
    }
    if (status.state == wire::NodeState::kTraining || status.state == wire::NodeState::kReady) {
      throw std::runtime_error(removed + " holds a stage of cluster " + std::to_string(cluster) +
                               ", whose " + m.name + " runs job " +
                               std::to_string(status.job_id) + ", which no `ravnest train` " +
                               "follows: nothing changed; remove it once the job ended (`ravnest " +
                               "stop` ends it now)");
    }
  }
}

// clusterize again with what plan.json recorded: the model, seed and example inputs.
void PoolCommand::full_replan() const {
  const auto recorded = config::load_plan_file(config::PlanLayout(plan_dir).plan_file());
  if (!recorded.mode.empty()) {
    throw std::runtime_error("--replan: the plan in " + plan_dir + " is a " + recorded.mode +
                             " plan; run `ravnest clusterize --mode ...` again");
  }
  graph::ClusterizeOptions options;
  options.model_path = recorded.model;
  options.seed = recorded.seed;
  options.example_inputs = recorded.example_inputs;
  options.nodes_path = nodes_path;
  options.out_dir = plan_dir;
  if (!no_memory_probe) options.memory_probe = process_memory_probe();
  const auto result = graph::clusterize(options, [](const std::string&) {});
  say("replanned " + plan_dir + ": " + std::to_string(result.plan.clusters.size()) +
      " cluster(s), " + std::to_string(result.nodes.size()) + " node(s); `ravnest push` sends "
      "them");
}

}  // namespace

Command add_pool(CLI::App& app) {
  auto c = std::make_shared<PoolCommand>();
  auto* cmd = app.add_subcommand("pool", "Add a node to the pool or remove one, and replan only "
                                         "what the change touches");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--tracker", c->tracker,
                  "HOST:PORT of a tracker (ravnest tracker): write --write from its live pool, "
                  "with the figures each daemon measured");
  cmd->add_option("--write", c->nodes_path, "with --tracker: the pool file to write")
      ->capture_default_str();
  cmd->add_option("--secret-file", c->connection.secret_file,
                  "with --tracker: the shared secret (default: $RAVNEST_SECRET_FILE, else "
                  "node_data's secret)");
  cmd->add_flag("--insecure", c->connection.insecure, "with --tracker: plain TCP instead of TLS");
  auto* add = cmd->add_subcommand("add", "Add a node to node_configs.json; it becomes a spare");
  auto* remove = cmd->add_subcommand(
      "remove", "Remove a node from node_configs.json; a spare takes its stage in the plan");
  for (auto* sub : {add, remove}) {
    sub->add_option("name", c->name, "the node, N or node_N")->required();
    sub->add_option("--nodes", c->nodes_path, "node pool, Ravnest's node_configs.json or TOML")
        ->capture_default_str();
    sub->add_option("--plan", c->plan_dir, "plan directory written by clusterize")->capture_default_str();
    sub->add_flag("--replan", c->replan,
                  "plan the whole pool anew with the plan's model and example inputs");
    sub->add_flag("--no-memory-probe", c->no_memory_probe,
                  "with --replan: plan memory with the formula alone");
  }
  remove->add_option("--secret-file", c->connection.secret_file,
                     "file holding the daemons' shared secret, to ask the plan's nodes whether "
                     "they run a job (default: $RAVNEST_SECRET_FILE, else the plan's or "
                     "node_data's secret)");
  remove->add_flag("--insecure", c->connection.insecure, "plain TCP instead of TLS");
  add->add_option("--ip", c->node.address, "the node's daemon, HOST:PORT")->required();
  add->add_option("--ram", c->node.ram_gb, "its memory in GB")->required();
  add->add_option("--bandwidth", c->node.bandwidth_mbps, "its bandwidth in Mbps")->required();
  c->gpu_memory = add->add_option("--gpu-memory", c->gpu_memory_gb, "its GPU's memory in GB");
  return {cmd, [c, cmd, add, remove] {
            if (!c->tracker.empty()) {
              if (add->parsed() || remove->parsed()) {
                throw std::runtime_error("ravnest pool: --tracker writes the whole pool; it "
                                         "takes no add or remove");
              }
              const auto pool = read_tracker_pool(c->tracker, c->connection);
              write_tracker_pool(pool, c->tracker, c->nodes_path);
              say("wrote " + c->nodes_path + ": " + std::to_string(pool.members.size()) +
                  " node(s) from tracker " + c->tracker + " (epoch " +
                  std::to_string(pool.epoch.value) + ")");
              return 0;
            }
            if (!add->parsed() && !remove->parsed()) {
              throw std::runtime_error("ravnest pool: give add, remove or --tracker HOST:PORT (" +
                                       cmd->get_name() + " --help)");
            }
            return add->parsed() ? c->add() : c->remove();
          }};
}

}  // namespace ravnest::cli
