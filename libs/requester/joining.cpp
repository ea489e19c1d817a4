#include "libs/requester/joining.h"

#include <algorithm>
#include <stdexcept>

#include "libs/base/atomic_file.h"
#include "libs/base/edit_lock.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/planner/rings.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

Joining join_nodes(const std::string& plan_dir, const std::string& secret,
                                 const std::vector<config::NodeConfig>& newcomers, int like,
                                 const std::function<void(const std::string&)>& log,
                                 bool insecure) {
  // Held to the end: a join or pool edit at the same moment reads the plan this one wrote.
  const base::EditLock editing(plan_dir);
  const Plan plan = load_plan(plan_dir);
  const config::PlanLayout layout(plan_dir);
  // A job that the `ravnest train` which started it follows takes the new cluster in itself
  // (running_plan_change.cpp): the plan's nodes are left to it.
  const auto following = read_following(plan_dir);
  // The plan as it will be; nothing is written yet.
  std::vector<config::NodeMetadata> nodes = plan.nodes;
  Joining joining;
  joining.joined = membership::join_cluster(nodes, like, newcomers);
  // A plan of one cluster has no rings (nothing to average with): the grown plan gets them as
  // `clusterize` forms a plan of two clusters. Every node's metadata changed already.
  if (plan.cluster_ids().size() == 1) {
    // assign_rings reads each cluster's holders in pipeline order.
    std::stable_sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) {
      return std::make_pair(a.cluster, a.position) < std::make_pair(b.cluster, b.position);
    });
    planner::assign_rings(nodes);
  }
  const auto& joined = joining.joined;
  auto meta_of = [&](int id) -> const config::NodeMetadata& {
    return *std::find_if(nodes.begin(), nodes.end(),
                         [&](const config::NodeMetadata& m) { return m.node_id == id; });
  };

  // The newcomers' pinned certificates too, if the pool pins them: they are reached first.
  Plan reached = plan;
  for (auto& m : reached.nodes) m.tls_fingerprints = meta_of(m.node_id).tls_fingerprints;
  Requester requester(reached, secret, insecure);
  for (const auto& m : plan.nodes) {
    if (following) break;
    const auto s = requester.status_of(m, 5);
    if (s.state == wire::NodeState::kTraining || s.state == wire::NodeState::kReady) {
      throw std::runtime_error(m.name + " (" + m.address + "): runs job " +
                               std::to_string(s.job_id) +
                               ", which no `ravnest train` follows (detached or attached): a "
                               "running job takes a cluster in while the `ravnest train` that "
                               "started it follows it (or `ravnest stop` first)");
    }
  }
  for (int id : joined.nodes) {
    const auto& m = meta_of(id);
    const auto s = requester.status_of(m, 5);
    if (s.node != m.name) {
      throw std::runtime_error(m.name + " (" + m.address + "): the daemon there serves " +
                               s.node + "; start `ravnestd --node " + m.name + "` there");
    }
    if (s.state == wire::NodeState::kTraining || s.state == wire::NodeState::kReady) {
      throw std::runtime_error(m.name + " (" + m.address + "): busy: job " +
                               std::to_string(s.job_id) + " is loaded there");
    }
  }
  for (int id : joined.nodes) {
    const auto& m = meta_of(id);
    const uint64_t bytes =
        requester.push_stage(m, layout.resolve(m.stage_file), config::to_json(m));
    log("pushed the stage of cluster " + std::to_string(like) + "'s position " +
        std::to_string(m.position) + " (" + std::to_string(bytes) + " bytes) to " + m.name +
        " at " + m.address);
  }
  // The plan directory: the node files, then plan.json (what names the nodes) last.
  for (int id : joined.changed) {
    base::write_file_atomically(layout.node_file(id), config::to_json(meta_of(id)));
  }
  base::write_file_atomically(
      layout.plan_file(),
      membership::join_cluster_in_plan_json(base::read_file(layout.plan_file()), like, joined, nodes));
  log("the plan " + plan_dir + " has cluster " + std::to_string(joined.cluster));
  if (following) {
    joining.job_id = following->job_id;
    joining.follower_pid = following->pid;
    return joining;  // the follower gives the training nodes their metadata at its hold
  }
  std::vector<config::NodeMetadata> others;
  for (int id : joined.changed) {
    if (std::find(joined.nodes.begin(), joined.nodes.end(), id) == joined.nodes.end()) {
      others.push_back(meta_of(id));
    }
  }
  requester.push_metadata(others, log);
  return joining;
}

}  // namespace ravnest::requester
