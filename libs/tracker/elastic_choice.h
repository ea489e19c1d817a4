// ElasticChoice: what `ravnest train --elastic` does when a node of its plan is lost (expired in
// the tracker, or its daemon failed mid-job): which idle registered node takes its place, or that
// its cluster is dropped because none fits; and which newly registered nodes join as one more
// cluster (choose_join). Plain functions on plain data, no clock and no I/O (docs/tracker.md,
// issue 45 item 3; libs/requester/elastic_follower.h acts on them).
//
// A candidate fits when it is live in the pool, not already in the plan, not already chosen for
// another lost node, and its measured memory is at least the lost stage's need. Among those that
// fit, the one with the most measured memory is chosen (ties: the smallest name), so the choice
// is the same whatever order the pool arrives in. Lost nodes are decided in name order. A cluster
// is replaced whole or not at all: when one of its lost nodes has no idle node that fits, the
// cluster is dropped (one change, naming that node) and none of its lost nodes takes a spare.
//
// Any thread; throws nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libs/tracker/membership.h"

namespace ravnest::tracker {

struct PlannedNode {
  std::string name;           // node_<id>
  int cluster = 0;
  uint64_t need_bytes = 0;    // the stage's memory need
};

struct ElasticChange {
  enum class Kind { replace, drop_cluster };
  Kind kind = Kind::replace;
  std::string lost;           // the planned node that was lost
  std::string replacement;    // kind == replace: the idle node taking its place
  int cluster = 0;
  // One line for train's output and the metrics files; `why`, when given, follows "lost" in
  // parentheses ("elastic: node_1 lost (no heartbeat for 30 s); node_8 takes ...").
  std::string line(const std::string& why = "") const;
};

// `plan`: every node of the running plan. `lost`: the names among them that were lost.
// `pool`: the live members now (names → members, as Membership holds them).
std::vector<ElasticChange> choose_elastic_changes(const std::vector<PlannedNode>& plan,
                                                  const std::vector<std::string>& lost,
                                                  const std::map<std::string, Member>& pool);

// Idle nodes enough for one more cluster (issue 45 item 3's joins): `stage_needs` are the memory
// needs of the stages of the cluster the new one is cut like, root first; `candidates` the idle
// members that may join. For each stage in order, the candidate with the most measured memory at
// least its need, not chosen already (ties: the smallest name). Returns the chosen names, root
// first, or nothing when some stage has no candidate that fits (or there are no stages).
std::vector<std::string> choose_join(const std::vector<uint64_t>& stage_needs,
                                     const std::map<std::string, Member>& candidates);

// "elastic: node_4 and node_5 registered; they join as cluster 2 at the next update boundary"
std::string join_line(const std::vector<std::string>& names, int cluster);

}  // namespace ravnest::tracker
