// Ring membership when clusters come and go (docs/faults.md#providers-that-come-and-go): from
// plan.json's rings (every member, in cluster order) and the clusters that still train, each
// surviving member's new view of its ring: size, position and two neighbours, the members of the
// dropped clusters removed and the order of the others kept. A pure function, so that the
// requester that follows a job computes the same views whatever the order the failures arrive in.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/plan/plan_file.h"

namespace ravnest::membership {

struct RingMemberInfo {
  int cluster = 0;
  std::string address;  // "host:port"
};

// For every node of a live cluster that is a member of one of `rings`: its views, one per ring
// it belongs to, in the order of `rings` (`parameters` left empty: a node keeps its own). A ring
// left with one member has size 1 (its reduce leaves the tensors as they are). Throws
// std::invalid_argument naming the ring and node when a member is missing from `members`, or
// when a ring has two members of one cluster.
std::map<int, std::vector<config::RingMembership>> ring_views(
    const std::vector<config::PlanRing>& rings, const std::map<int, RingMemberInfo>& members,
    const std::set<int>& live_clusters);

// The round each ring runs from over a new membership, so that its survivors agree on it: a
// member that completed the interrupted round (it had every segment before the dead member went)
// and one that failed it would otherwise run different rounds and wait on each other. It is the
// fewest rounds any live member of the ring completed (`completed`: node -> ring id -> rounds
// completed, from Node.ringRounds); a member that completed it already runs it again from its
// kept inputs for the others' sake. A ring of `views` (node -> its views, as ring_views returns)
// with a member missing from `completed`, or that member's ring missing, gets no round: its
// members each run the round they are at, as without a coordinator's round.
std::map<int, uint64_t> rounds_to_run_from(
    const std::map<int, std::vector<config::RingMembership>>& views,
    const std::map<int, std::map<int, uint64_t>>& completed);

// plan.json's rings as the node files describe them (each node knows only its own place): every
// ring id with its members in position order, and each node's cluster and address. Throws
// std::invalid_argument when two nodes claim one position of a ring, or a ring has a gap.
std::vector<config::PlanRing> rings_of_nodes(const std::vector<config::NodeMetadata>& nodes);
std::map<int, RingMemberInfo> ring_members_of(const std::vector<config::NodeMetadata>& nodes);

// What a member does first at its reduce of `round` of ring `ring` over a membership whose
// coordinator says the ring runs from `from` (RingView.runFrom, once per membership, from
// rounds_to_run_from):
// kThisRound: nothing more (it failed or has not begun this round, as the others);
// kPreviousFirst: it completed round `from` = round - 1 while another member failed it, so it
// runs that round again from the inputs it kept (`kept_round`), for the others, and keeps its
// own result. Throws std::runtime_error naming the ring and rounds for any other `from` (members
// more than one round apart, which one dead member cannot cause) or when round - 1 was not kept.
enum class RoundToRun { kThisRound, kPreviousFirst };
RoundToRun round_to_run(int ring, uint64_t round, uint64_t from,
                        std::optional<uint64_t> kept_round);

}  // namespace ravnest::membership
