// Which clusters a followed job takes in when plan.json changes while it runs
// (docs/faults.md#providers-that-come-and-go): a dropped cluster whose nodes `ravnest replace`
// gave anew rejoins, a cluster `ravnest join` added joins. Pure: the plan the job runs and the
// plan as plan.json now says, no file and no daemon.
//
// Each cluster taken in starts from the checkpoint of a cluster still training: one cut as it is
// (the same stage bytes at every position: the joined cluster's `--like` cluster, or any other of
// that cut), whose checkpoints it takes as they are; else, the planner having cut it by its own
// nodes' figures, the first training cluster, whose checkpoints are re-cut to its stages
// (training/checkpoint_recut.h).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::membership {

struct ClusterAdmission {
  std::vector<int> rejoining;  // dropped clusters whose nodes plan.json names anew (or `back`), ascending
  std::vector<int> joining;    // clusters plan.json has and the running job has not, ascending
  std::map<int, int> source;   // each of them -> the training cluster whose checkpoint it takes
  std::set<int> recut;         // those whose source is cut at other points: its checkpoints re-cut
  // Dropped clusters not taken in, ascending: the job resumes without them (their nodes neither
  // loaded nor in the rings), and each may rejoin at a later boundary once its nodes are replaced.
  std::vector<int> staying_dropped;
  // Not empty: nothing can be taken in now (why, one line); the caller looks again later.
  std::string wait;

  bool empty() const { return rejoining.empty() && joining.empty(); }
};

// `running`: the nodes of the plan the job runs; `now`: plan.json's nodes; `dropped`: the
// clusters the job dropped. Nothing to take in (empty(), no `wait`) when no dropped cluster has
// other nodes and no cluster is new. `wait` says why when:
//   - plan.json no longer names a cluster the job runs (a plan rewritten by hand or by a new
//     `clusterize`: not a change a running job can take);
//   - no cluster trains (every one dropped): nothing to start one from.
// `back`: dropped clusters that rejoin with the nodes they had (their connection was lost, their
// nodes answer again: libs/requester/link_rejoin.h), as if plan.json named them anew.
ClusterAdmission admit_clusters(const std::vector<config::NodeMetadata>& running,
                                const std::vector<config::NodeMetadata>& now,
                                const std::set<int>& dropped, const std::set<int>& back = {});

}  // namespace ravnest::membership
