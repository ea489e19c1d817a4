// Which clusters a followed job dropped on a lost connection come back with their own nodes
// (`ravnest train --elastic`, docs/faults.md#a-dropped-cluster-rejoins): a relay that restarted,
// a link that broke while the node lived. Once every node of such a cluster answers again as
// itself, holding the plan's stage and running no job, the requester takes the cluster back in at
// the next update boundary (membership/running_plan_change.cpp), at most a bounded number of
// times per cluster, so that a node whose link flaps cannot stop the job over and over. A node
// that is really dead never answers: the tracker expires it and the elastic follower replaces it,
// as before. A node that lives at another address now (its relay died and `--relay auto` took
// another: docs/relay.md#auto) is asked where the tracker's live pool has it, and answering there
// as itself, its cluster rejoins with the plan moved to that address (move_node).
// Pure: plain data in and out, no daemon; any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/wire/node_report.h"

namespace ravnest::requester {

// Why `status`, the answer of the node the plan calls `meta`, keeps it out of a job the plan runs,
// in one line naming it ("node_1 (127.0.0.1:8081): no stage stored; run `ravnest push`"), or ""
// when it may take its place: it serves that node, holds the plan's stage intact and trains no job.
// `ravnest train`'s check of every node before a job (Impl::check_nodes) and the link rejoin's.
std::string unfit_for_job(const config::NodeMetadata& meta, const wire::NodeStatusData& status);

// The clusters dropped on a lost connection that come back now, and those that may not any more.
struct LinkRejoins {
  std::vector<int> back;      // every node answers and fits; rejoins left: taken in, ascending
  std::vector<int> given_up;  // `most` rejoins done already: they stay dropped, ascending
};

// Where node `meta` of a dropped cluster is asked whether it answers again: its first address in
// the tracker's live pool (`live`: name -> address, as the elastic follower last read it) when
// the pool has it there and the plan has another (its relay changed), else the plan's.
std::string address_to_ask(const config::NodeMetadata& meta,
                           const std::map<std::string, std::string>& live);

// `nodes` (a plan's) with node `id` at `address`: its own address, every mention of it in the
// others (their pipeline's addresses, ring peers: config::rename_node_mentions) and its pinned
// certificate (the same daemon's, moved to the new address). Returns the ids of the nodes whose
// metadata changed, ascending (none when it was there already). Throws std::runtime_error naming
// the node when `id` is not in `nodes`, or another node has `address`.
std::vector<int> move_node(std::vector<config::NodeMetadata>& nodes, int id,
                           const std::string& address);

// `why_not`: each cluster dropped on a lost connection and still dropped -> why one of its nodes
// cannot come back now ("" when every node answered and fits: unfit_for_job, not busy); `done`:
// the rejoins after a lost connection each cluster made in this job (absent: none); `most`: how
// many one cluster may make (0: none).
LinkRejoins choose_link_rejoins(const std::map<int, std::string>& why_not,
                                const std::map<int, int>& done, int most);

}  // namespace ravnest::requester
