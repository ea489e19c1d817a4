// A dropped cluster rejoins the job that `ravnest train --drop-failed-clusters` follows
// (docs/faults.md#providers-that-come-and-go). `ravnest replace` (another terminal) gave the
// dropped cluster's slot a spare and rewrote plan.json without stopping the job; seeing plan.json
// change, the follower brings the cluster back at the next update boundary the others reach:
//
// 1. the roots of the clusters still training hold at one update boundary U (hold_at_boundary),
//    and those clusters stop there, each node writing its checkpoint of update U;
// 2. the requester takes the new plan, gives every node whose metadata changed its new metadata
//    (the ring neighbours of the spare), and copies each stage's checkpoint of update U from the
//    first cluster still training to the rejoining cluster's slot of that stage;
// 3. every cluster loads the job from update U (resumeFrom = U, a new job id, the same identity:
//    the same job text and stages) and starts; the rings' membership is the plan's again.
//
// Exact: from U on it is the run of all clusters resumed from U, the rejoining cluster with the
// weights, optimizer state and ring round counter of the cluster it copied (with reduce =
// "parameters" every update those are every survivor's), reading its own shard from batch U. Not
// a round-level join: every cluster pauses for the stop and the load (seconds); its shard's
// batches between its drop and U are not trained.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/requester_impl.h"
#include "libs/training/checkpoint.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

uint64_t Requester::rejoin_replaced(const std::shared_ptr<Watch>& watch_ptr, uint64_t job_id,
                                    const config::JobSpec& job, const std::string& job_text,
                                    const std::string& identity, std::string* plan_json,
                                    const Log& log) {
  Impl& impl = *impl_;
  Watch& watch = *watch_ptr;
  const config::PlanLayout layout(impl.plan_.dir);
  std::string text;
  try {
    text = base::read_file(layout.plan_file());
  } catch (const std::exception&) {
    return 0;
  }
  if (text == *plan_json) return 0;
  Plan now;
  try {
    now = load_plan(impl.plan_.dir);
  } catch (const std::exception&) {
    // Half-written by a replace that goes on (plan.json is written last): the next poll.
    return 0;
  }
  auto ids_of = [](const Plan& plan, int cluster) {
    std::set<int> ids;
    for (const auto& m : plan.nodes) {
      if (m.cluster == cluster) ids.insert(m.node_id);
    }
    return ids;
  };
  int cluster = -1;
  for (int c : watch.dropped) {
    if (ids_of(now, c) != ids_of(impl.plan_, c)) {
      cluster = c;
      break;
    }
  }
  // Not yet: plan.json is read again at the next poll, and each wait is said once.
  auto wait = [&](const std::string& why) -> uint64_t {
    if (log && waiting_for_ != why) log("warning: " + why);
    waiting_for_ = why;
    return 0;
  };
  if (cluster < 0) {
    *plan_json = text;
    return 0;
  }
  if (watch.dropped.size() > 1) {
    // The job would load on the other dropped clusters' nodes and their rings (not built).
    return wait("cluster " + std::to_string(cluster) + " cannot rejoin while another cluster "
                "is dropped too");
  }
  for (const auto& m : now.cluster(cluster)) {
    try {
      const auto s = impl.status_of(m, 2);
      if (s.state == wire::NodeState::kTraining || s.state == wire::NodeState::kReady) {
        return wait("cluster " + std::to_string(cluster) + " waits to rejoin: " + m.name +
                    " runs job " + std::to_string(s.job_id));
      }
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      return wait("cluster " + std::to_string(cluster) + " waits to rejoin: " + e.what());
    }
  }
  *plan_json = text;
  int source_cluster = -1;
  for (int c : impl.plan_.cluster_ids()) {
    if (!watch.dropped.count(c)) {
      source_cluster = c;
      break;
    }
  }
  const std::string who = "cluster " + std::to_string(cluster);
  if (log) log(who + " rejoins: plan.json names " + [&] {
                 std::string names;
                 for (const auto& m : now.cluster(cluster)) {
                   names += (names.empty() ? "" : ", ") + m.name;
                 }
                 return names;
               }());

  // 1. The others hold at one update boundary and stop there, each writing its checkpoint.
  const double paused = base::now_seconds();
  const auto boundary = impl.hold_at_boundary(job_id, 60, watch.dropped);
  if (!boundary || *boundary == 0) {
    throw std::runtime_error(who + " cannot rejoin: the clusters still training did not reach "
                             "one update boundary within 60 s");
  }
  const uint64_t updates = *boundary;
  // The dropped clusters' nodes may be gone (their failures to stop say nothing); a node still
  // training is found by the status polls of the job that follows.
  impl.stop_all(who + " rejoins the job", job_id, 30);

  // 2. The new plan: metadata where it changed, the checkpoints of update U to the rejoining slots.
  const Plan before = impl.plan_;
  impl.plan_ = now;
  impl.pin_certificates();
  std::map<int, std::string> old_json;
  for (const auto& m : before.nodes) old_json[m.node_id] = config::to_json(m);
  for (const auto& m : now.nodes) {
    auto it = old_json.find(m.node_id);
    if (it == old_json.end() || it->second == config::to_json(m)) continue;  // a spare: replaced
    push_stage(m, layout.resolve(m.stage_file), config::to_json(m));
    if (log) log("pushed the new metadata to " + m.name);
  }
  const std::string copy =
      (fs::path(impl.plan_.dir) / (".checkpoint." + std::to_string(::getpid()) + ".pt")).string();
  struct Removed {
    std::string path;
    ~Removed() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } removed{copy};
  std::map<int, config::NodeMetadata> source_at;  // by position
  for (const auto& m : now.nodes) {
    if (m.cluster == source_cluster) source_at[m.position] = m;
  }
  for (const auto& m : now.nodes) {
    if (m.cluster != cluster) continue;
    const auto& source = source_at.at(m.position);
    fetch_checkpoint(source, identity, source.cluster, source.position, updates, copy);
    // The slot's own from now on (a checkpoint names its slot, and a node resumes only its
    // own); the source's losses and validation rounds are not the rejoining leaf's: its
    // losses.txt holds the batches it trains from U on.
    training::StageCheckpoint adopted = training::load_checkpoint(copy);
    adopted.cluster = m.cluster;
    adopted.position = m.position;
    adopted.losses.clear();
    adopted.validation.clear();
    training::save_checkpoint(adopted, copy);
    store_checkpoint(m, identity, m.cluster, m.position, updates, copy);
  }

  // 3. Every cluster loads the job from update U and starts; the rings are the plan's again.
  std::vector<JobShipment> shipments;
  std::map<std::string, std::string> checksums;
  for (const auto& meta : now.nodes) shipments.push_back(job_shipment_for(job, meta, checksums));
  impl.ship_job_files(shipments, log);
  const uint64_t next_id =
      std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20);
  impl.load_job(job_text, next_id, identity, updates, shipments);
  watch.dropped.erase(cluster);
  watch.finished.clear();
  watch.ring_epoch = 0;
  impl.subscribe(watch_ptr, log);
  impl.start(next_id);
  impl.coordinate_rings(next_id);
  write_following(impl.plan_.dir, {::getpid(), next_id, watch.dropped});
  if (log) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", base::now_seconds() - paused);
    log(who + " rejoined after update " + std::to_string(updates) + ": every cluster resumed "
        "from there as job " + std::to_string(next_id) + " (" + seconds + " s from the hold to "
        "the start), " + who + " from cluster " + std::to_string(source_cluster) +
        "'s checkpoint");
  }
  return next_id;
}

}  // namespace ravnest::requester
