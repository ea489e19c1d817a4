#include "libs/requester/replacement.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <unistd.h>

#include "libs/base/atomic_file.h"
#include "libs/config/plan/checkpoint_keeper.h"
#include "libs/config/plan/node_replacement.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/requester/checkpoint_copy.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/job_identity.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

namespace {

const config::NodeMetadata* find_node(const Plan& plan, int id) {
  for (const auto& meta : plan.nodes) {
    if (meta.node_id == id) return &meta;
  }
  return nullptr;
}

// The identity of the plan's last job, or "" when it trained none (or its job file is gone).
std::string last_job_identity(const Plan& plan) {
  try {
    const std::string job = last_job_path(plan.dir);
    if (!fs::exists(job)) return "";
    return job_identity(base::read_file(job), plan);
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

void write_replacement(const std::string& plan_dir, const std::vector<config::NodeMetadata>& nodes,
                       const std::vector<int>& changed, const config::NodeMetadata& old,
                       int spare_id) {
  const config::PlanLayout layout(plan_dir);
  const config::NodeMetadata& spare_meta = *std::find_if(
      nodes.begin(), nodes.end(), [&](const auto& m) { return m.node_id == spare_id; });
  const std::string stage = layout.resolve(old.stage_file);
  // The plan directory: new files first, plan.json (what names the nodes) last, then the old
  // node's files go.
  if (layout.resolve(spare_meta.stage_file) != stage) {
    // Copied through a temporary file and renamed, as every file of the plan is written.
    const std::string target = layout.resolve(spare_meta.stage_file);
    const std::string temp = target + ".tmp." + std::to_string(::getpid());
    try {
      fs::copy_file(stage, temp, fs::copy_options::overwrite_existing);
      fs::rename(temp, target);
    } catch (const fs::filesystem_error& e) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw std::runtime_error(target + ": cannot write: " + e.code().message());
    }
  }
  for (int id : changed) {
    const auto& meta = *std::find_if(nodes.begin(), nodes.end(),
                                     [&](const auto& m) { return m.node_id == id; });
    base::write_file_atomically(layout.node_file(id), config::to_json(meta));
  }
  base::write_file_atomically(
      layout.plan_file(), config::replace_node_in_plan_json(base::read_file(layout.plan_file()),
                                                            old.node_id, spare_id));
  std::error_code ignored;
  fs::remove(layout.node_file(old.node_id), ignored);
  if (layout.resolve(old.stage_file) != layout.resolve(spare_meta.stage_file)) {
    fs::remove(layout.resolve(old.stage_file), ignored);
  }
}

// The spare's daemon answers as the spare, with no job loaded; else one line why not.
void check_spare_is_idle(Requester& requester, const config::NodeMetadata& spare_meta,
                         const config::NodeConfig& spare) {
  const auto status = requester.status_of(spare_meta, 5);
  if (status.node != spare.name) {
    throw std::runtime_error(spare.name + " (" + spare.address + "): the daemon there serves " +
                             status.node + "; start `ravnestd --node " + spare.name + "` there");
  }
  if (status.state == wire::NodeState::kTraining || status.state == wire::NodeState::kReady) {
    throw std::runtime_error(spare.name + " (" + spare.address + "): busy: job " +
                             std::to_string(status.job_id) + " is loaded there");
  }
}

// The checkpoint to move into `into`: the newest of `old`'s slot that every other node of the
// plan holds too, from `old` itself if it still answers, else from its keeper. Sets
// result.checkpoint and checkpoint_from when one is found; says why not in `log` otherwise.
void fetch_slot_checkpoint(Requester& requester, const Plan& plan,
                           const config::NodeMetadata& old, const std::string& identity,
                           const std::string& into, Replacement& result,
                           const std::function<void(const std::string&)>& log,
                           const std::set<std::string>& also_replaced) {
  std::set<uint64_t> common;
  bool first = true;
  for (const auto& meta : plan.nodes) {
    if (meta.node_id == old.node_id || also_replaced.count(meta.name)) continue;
    const auto held = requester.checkpoints(meta, identity, -1, -1);
    std::set<uint64_t> mine(held.begin(), held.end());
    if (first) {
      common = mine;
      first = false;
    } else {
      std::set<uint64_t> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
  }
  // The old node itself if it still answers, else its keeper.
  std::vector<const config::NodeMetadata*> sources{&old};
  if (const auto keeper = config::checkpoint_keeper(old)) {
    const auto* k = find_node(plan, keeper->node);
    if (k && !also_replaced.count(k->name)) sources.push_back(k);
  }
  std::string tried;
  for (const auto* source : sources) {
    std::vector<uint64_t> held;
    try {
      held = requester.checkpoints(*source, identity, old.cluster, old.position,
                                   source == &old ? 3 : 30);
    } catch (const std::exception& e) {
      tried += (tried.empty() ? "" : "; ") + std::string(e.what());
      continue;
    }
    for (auto u = held.rbegin(); u != held.rend(); ++u) {
      if (!first && !common.count(*u)) continue;
      requester.fetch_checkpoint(*source, identity, old.cluster, old.position, *u, into);
      result.checkpoint = *u;
      result.checkpoint_from = source->name;
      break;
    }
    if (result.checkpoint) break;
    tried += (tried.empty() ? "" : "; ") + source->name + " holds none the others hold";
  }
  if (!result.checkpoint) {
    log("no checkpoint of " + old.name + "'s slot to move (" + tried +
        "): the job starts afresh with `ravnest train`");
  }
}

// Every node but the spare whose metadata the replacement changed gets it, with its unchanged
// stage; the nodes being replaced too are gone (their spares get theirs).
void push_to_neighbours(Requester& requester, const std::vector<config::NodeMetadata>& nodes,
                        const std::vector<int>& changed, int spare_id,
                        const std::set<std::string>& also_replaced,
                        const std::function<void(const std::string&)>& log) {
  std::vector<config::NodeMetadata> others;
  for (const auto& meta : nodes) {
    const bool pushed = meta.node_id != spare_id && !also_replaced.count(meta.name);
    if (pushed && std::count(changed.begin(), changed.end(), meta.node_id) > 0) {
      others.push_back(meta);
    }
  }
  requester.push_metadata(others, log);
}

Replacement replace_node(const std::string& plan_dir, const std::string& secret,
                         const std::string& old_name, const config::NodeConfig& spare,
                         const std::function<void(const std::string&)>& log, bool insecure,
                         const std::set<std::string>& also_replaced) {
  Plan plan = load_plan(plan_dir);
  auto old_it = std::find_if(plan.nodes.begin(), plan.nodes.end(),
                             [&](const auto& m) { return m.name == old_name; });
  if (old_it == plan.nodes.end()) {
    throw std::runtime_error(old_name + " is not in the plan " + plan_dir);
  }
  const config::NodeMetadata old = *old_it;
  const config::PlanLayout layout(plan_dir);
  // A job followed by a requester that drops failed clusters goes on: only a dropped cluster's
  // node is replaced then, and that requester brings its cluster back.
  const auto following = read_following(plan_dir);
  if (following && !following->dropped.count(old.cluster)) {
    throw std::runtime_error(old.name + "'s cluster " + std::to_string(old.cluster) +
                             " trains in job " + std::to_string(following->job_id) +
                             ", followed by `ravnest train` (pid " +
                             std::to_string(following->pid) +
                             "): only a node of a dropped cluster is replaced while it runs "
                             "(`ravnest stop` first)");
  }

  // The plan as it will be; nothing is written yet.
  std::vector<config::NodeMetadata> nodes = plan.nodes;
  const std::vector<int> changed = config::replace_node(nodes, old.node_id, spare);
  const config::NodeMetadata& spare_meta = *std::find_if(
      nodes.begin(), nodes.end(), [&](const auto& m) { return m.node_id == spare.id; });

  // The spare's pinned certificate too, if the pool pins one: it is reached before it joins.
  Plan reached = plan;
  if (!reached.nodes.empty()) reached.nodes.front().tls_fingerprints = spare_meta.tls_fingerprints;
  Requester requester(reached, secret, insecure);
  Replacement result{old.name, spare.name, old.cluster, old.position};

  check_spare_is_idle(requester, spare_meta, spare);

  if (following) {
    result.rejoined_by = following->pid;
    const std::string stage = layout.resolve(old.stage_file);
    const uint64_t bytes = requester.push_stage(spare_meta, stage, config::to_json(spare_meta));
    log("pushed " + old.name + "'s stage (" + std::to_string(bytes) + " bytes) to " +
        spare.name + " at " + spare.address);
    write_replacement(plan_dir, nodes, changed, old, spare.id);
    log("the plan " + plan_dir + " names " + spare.name + " in " + old.name +
        "'s place; job " + std::to_string(following->job_id) + " goes on");
    return result;
  }

  // What is left of an interrupted job stops first (each node writing the checkpoint of its last
  // update): a node still waiting for the dead one would refuse its new metadata.
  for (const auto& failure : requester.stop_all(old.name + " is being replaced", 0, 60)) {
    if (failure.rfind(old.name + " ", 0) != 0) log("not stopped: " + failure);
  }

  // The checkpoint to move: the newest of the old slot that every other node holds too. It
  // passes through a temporary file of the plan directory (streamed in, then out: a checkpoint
  // is never held whole in memory), removed whatever happens.
  const TemporaryCheckpoint removed(plan_dir, "");
  const std::string& checkpoint = removed.path;
  const std::string identity = last_job_identity(plan);
  if (!identity.empty()) {
    fetch_slot_checkpoint(requester, plan, old, identity, checkpoint, result, log,
                          also_replaced);
  }

  // The spare first: it is what most likely refuses (not started, another node's daemon).
  const std::string stage = layout.resolve(old.stage_file);
  const uint64_t stage_bytes = requester.push_stage(spare_meta, stage, config::to_json(spare_meta));
  log("pushed " + old.name + "'s stage (" + std::to_string(stage_bytes) + " bytes) to " +
      spare.name + " at " + spare.address);
  if (result.checkpoint) {
    requester.store_checkpoint(spare_meta, identity, old.cluster, old.position,
                               *result.checkpoint, checkpoint);
    log("moved the checkpoint after update " + std::to_string(*result.checkpoint) + " from " +
        result.checkpoint_from + " to " + spare.name);
  }

  write_replacement(plan_dir, nodes, changed, old, spare.id);
  log("the plan " + plan_dir + " names " + spare.name + " in " + old.name + "'s place");

  push_to_neighbours(requester, nodes, changed, spare.id, also_replaced, log);
  return result;
}

}  // namespace ravnest::requester
