// The requester that follows a job of several clusters coordinates its rings' membership
// (TrainOptions::drop_failed_clusters, docs/faults.md#providers-that-come-and-go): it tells each
// ring member so (setRings epoch 0), and when a node fails it drops the node's cluster: stops its
// nodes and sends every member of the other clusters its rings without it (the next epoch).
#include <map>
#include <set>
#include <string>

#include <unistd.h>

#include "libs/membership/ring_view.h"
#include "libs/membership/ring_membership.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/requester_impl.h"
#include "libs/wire/lost_connection.h"
#include "libs/wire/membership_codec.h"

namespace ravnest::requester {

bool Requester::Impl::coordinate_rings(uint64_t job_id, const std::set<int>& skip,
                                       const NodeFailure& on_failure) {
  if (plan_.cluster_ids().size() < 2) return false;
  bool any = false;
  for (const auto& meta : plan_.nodes) {
    if (meta.rings.empty() || skip.count(meta.cluster)) continue;
    auto request = node(meta).setRingsRequest();
    request.setJobId(job_id);
    request.setEpoch(0);
    try {
      await(request.send().ignoreResult(), meta, "setRings", 10);
    } catch (const NodeCallError& e) {
      if (!taken(on_failure, meta, e)) throw;
      continue;
    }
    any = true;
  }
  return any;
}

void Requester::Impl::drop_cluster(Watch& watch, uint64_t job_id, int cluster,
                                   const std::string& why, const Log& log) {
  leave_out_cluster(watch, job_id, cluster, why, log);
  const std::set<int> live = live_clusters(watch);
  const auto views = membership::ring_views(membership::rings_of_nodes(plan_.nodes),
                                            membership::ring_members_of(plan_.nodes), live);
  // The survivors agree on the round each ring runs from: a member may have completed the round
  // its neighbour failed. Asked after the dropped cluster's nodes were stopped, so that no round
  // that needs them completes after the answer.
  std::map<int, std::map<int, uint64_t>> completed;
  for (const auto& meta : plan_.nodes) {
    if (!views.count(meta.node_id) || !live.count(meta.cluster)) continue;
    try {
      auto request = node(meta).ringRoundsRequest();
      request.setJobId(job_id);
      auto answer = await(request.send(), meta, "ringRounds", 5);
      completed[meta.node_id] = wire::decode_completed_rounds(answer.getRings());
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      // Its rings get no round to run from (each member runs the round it is at).
      if (log) log(std::string("warning: ") + e.what());
    }
  }
  set_live_rings(job_id, ++watch.ring_epoch, live,
                 membership::rounds_to_run_from(views, completed), log);
}

std::set<int> Requester::Impl::live_clusters(const Watch& watch) const {
  std::set<int> live;
  for (int id : plan_.cluster_ids()) {
    if (!watch.dropped.count(id)) live.insert(id);
  }
  return live;
}

void Requester::Impl::leave_out_cluster(Watch& watch, uint64_t job_id, int cluster,
                                        const std::string& why, const Log& log) {
  watch.dropped.insert(cluster);
  // Its nodes may be alive behind a connection that broke: they may come back as they are.
  if (wire::is_lost_connection(why)) watch.dropped_on_link[cluster] = job_id;
  const std::set<int> live = live_clusters(watch);
  std::string live_words;
  for (int id : live) live_words += (live_words.empty() ? "" : ", ") + std::to_string(id);
  const std::string line = "cluster " + std::to_string(cluster) + " dropped (" + why + "); " +
                           (live.size() == 1 ? "cluster " + live_words + " goes"
                                             : "clusters " + live_words + " go") +
                           " on without it, and its shard of the data is no longer trained";
  watch.dropped_lines.push_back(line);
  try {
    write_following(plan_.dir, {::getpid(), job_id, watch.dropped});
  } catch (const std::exception& e) {
    if (log) log(std::string("warning: ") + e.what() + " (`ravnest replace` cannot see the drop)");
  }
  if (log) log("warning: " + line);
  // Its nodes stop the job (the one that failed already did, or is gone): none stays in a ring.
  for (const auto& meta : plan_.cluster(cluster)) {
    try {
      auto request = node(meta).stopRequest();
      request.setReason("cluster " + std::to_string(cluster) + " was dropped: " + why);
      request.setJobId(job_id);
      await(request.send().ignoreResult(), meta, "stop", 2);
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception&) {
      // Dead or cut off: it cannot rejoin the rings (their members no longer name it).
    }
  }
}

void Requester::Impl::set_live_rings(uint64_t job_id, uint64_t epoch, const std::set<int>& live,
                                     const std::map<int, uint64_t>& run_from, const Log& log) {
  const auto views = membership::ring_views(membership::rings_of_nodes(plan_.nodes),
                                            membership::ring_members_of(plan_.nodes), live);
  for (const auto& meta : plan_.nodes) {
    auto it = views.find(meta.node_id);
    if (it == views.end() || !live.count(meta.cluster)) continue;
    auto request = node(meta).setRingsRequest();
    request.setJobId(job_id);
    request.setEpoch(epoch);
    auto list = request.initViews(static_cast<unsigned>(it->second.size()));
    for (unsigned i = 0; i < list.size(); ++i) {
      membership::RingView view{it->second[i], std::nullopt};
      if (auto from = run_from.find(view.ring.id); from != run_from.end()) {
        view.run_from = from->second;
      }
      wire::encode_ring_view(view, list[i]);
    }
    try {
      await(request.send().ignoreResult(), meta, "setRings", 5);
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      // Its own failure, if it failed, is found by the next status poll (and drops its cluster).
      if (log) log(std::string("warning: ") + e.what());
    }
  }
}

}  // namespace ravnest::requester
