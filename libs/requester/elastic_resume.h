// What `ravnest train JOB --elastic --tracker HOST:PORT` does when the job failed with no cluster
// left to train on (docs/tracker.md#elastic-jobs): a plan of one cluster whose node was killed, or
// the last cluster of several lost. The ElasticFollower replaces a node only while other clusters
// train; here the job has stopped (TrainFailed: what was left of it stopped on every node that
// answered, each writing the checkpoint of its last update), and the person who would type
// `ravnest replace OLD --with SPARE` then `ravnest resume` is this:
//   1. the plan's nodes that do not answer now are the candidates (every node answers: the job
//      failed for another reason, and fails as without --elastic);
//   2. the tracker must lose them: its pool is read until none of them is in it, at most its
//      expiry and 5 s more (one still heartbeating then is not replaced: the job fails);
//   3. tracker::choose_elastic_changes picks an idle registered node for each (the most measured
//      memory at least the stage's need); when one has none, the job fails, said in one line;
//   4. each goes through replace_node (replacement.h), exactly as `ravnest replace`: the job's
//      leftovers stopped, the newest checkpoint of the lost slot that every other node holds
//      moved to the spare from the lost node's keeper, the plan rewritten; several lost nodes
//      (two nodes of one cluster) are replaced one after the other, each leaving the others out
//      (replace_node's also_replaced): a slot whose keeper was lost too has no checkpoint, and
//      the job then resumes from its start;
// and the caller resumes the job from the newest checkpoint every node holds, as `ravnest resume`.
// Each replacement is one line on `options.log` ("elastic: node_1 lost (no heartbeat for 3 s);
// node_2 takes its place in cluster 0, the job resumes after update 20") and one row of
// elastic.csv (kind replace_resume) in the failed job's metrics folder; a lost node no idle node
// fits is one line and a row of kind fail.
//
// A lost connection is not a lost node: a job that failed on one (wire/lost_connection.h: a send
// to a peer failed, a node stopped answering: a relay restarted, a NAT forgot a mapping, a link
// blinked) while every node answers, or answers again before the tracker would expire it, is
// resumed with the same nodes, at most `link_resumes_left` times in one command: "elastic: job J
// failed on a lost connection (WHY) and every node answers: it resumes from the newest
// checkpoint every node holds (1 of at most 3)", a row of kind resume_link.
//
// A tracker that does not answer (restarting) is asked again for up to 30 s before the job fails
// as it did.
//
// Blocks (the wait for the tracker, replace_node's calls), on the calling thread. Throws what
// fetch_pool and replace_node throw (a tracker that does not answer, a spare that refuses).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "libs/requester/elastic_follower.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

// The job is to be resumed: what was said, '\n' between.
struct AfterFailure {
  std::string said;
  bool replaced = false;  // nodes were replaced; false: the same nodes, after a lost connection
};

// Set when the job is to be resumed (every lost node replaced, or a lost connection with every
// node answering); nothing when it is to fail as it did (why said on `options.log`, except when
// every node answers and the failure was not a lost connection). `interrupted` (Ctrl-C) ends the
// wait for the tracker: nothing.
std::optional<AfterFailure> replace_after_failure(const ElasticOptions& options,
                                                  const TrainFailed& failed,
                                                  int link_resumes_left,
                                                  const std::function<bool()>& interrupted = {});

// Resumes after a lost connection that one `ravnest train --elastic` makes at most.
inline constexpr int kLinkResumes = 3;

}  // namespace ravnest::requester
