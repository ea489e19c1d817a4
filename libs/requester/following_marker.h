// The marker a `ravnest train --drop-failed-clusters` that follows a job keeps in the plan
// directory (docs/faults.md#providers-that-come-and-go): which process follows which job, and
// which clusters it dropped. `ravnest replace` reads it: a node of a dropped cluster is replaced
// without stopping the job (the follower adds the cluster back, seeing plan.json change); one of
// a training cluster is refused. Written atomically; removed when the follower ends.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace ravnest::requester {

struct Following {
  int pid = 0;
  uint64_t job_id = 0;
  std::set<int> dropped;
};

std::string following_path(const std::string& plan_dir);  // <plan>/.following
void write_following(const std::string& plan_dir, const Following& following);
void remove_following(const std::string& plan_dir);  // best effort
// The marker, when its process still runs; nothing when there is none, it is unreadable, or its
// writer is gone (a follower killed before it could remove it).
std::optional<Following> read_following(const std::string& plan_dir);

}  // namespace ravnest::requester
