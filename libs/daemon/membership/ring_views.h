// RingViews: the running job's ring membership when the requester that follows it drops failed
// clusters (Node.setRings, which MembershipService serves: membership_service.h;
// docs/faults.md#providers-that-come-and-go). Until a new membership comes, a node's rings are
// its node file's; each setRings of a higher epoch replaces them, by ring id. `coordinated`
// (setRings epoch 0) says that a requester will send one when a cluster fails, so a failed
// cross-cluster reduce waits for it (wait_newer) instead of failing the job.
//
// set() on the RPC thread, the rest on the compute thread and the rings' threads: one mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::daemon {

class RingViews {
 public:
  // A new job: the node file's rings, no coordinator.
  void reset();
  // Epoch 0: the requester coordinates (no views). Else `views` replace those of their ring ids.
  // Returns why it refused (an epoch not above the current one), or "".
  std::string set(uint64_t epoch, const std::map<int, config::RingMembership>& views);
  bool coordinated() const;
  uint64_t epoch() const;
  // `ring` as this node now sees it (its parameters kept), and the epoch that view belongs to.
  config::RingMembership view(const config::RingMembership& ring, uint64_t* epoch) const;
  // Blocks until an epoch above `epoch` was set (true) or `timeout` passed, or the job was
  // stopped (end(): false at once).
  bool wait_newer(uint64_t epoch, std::chrono::milliseconds timeout) const;
  // The job was stopped (JobControl::stop_job): no membership will come for it, so a failed
  // reduce fails at once instead of waiting for one (a dropped cluster's node, stopped once its
  // link came back, would else wait kMembershipWaitSeconds). Until reset().
  void end();
  bool ended() const;

  // The round a ring runs from over the newest membership that named one (RingView.runFrom), and
  // that membership's epoch; nullopt when none did.
  std::optional<uint64_t> run_from(int ring, uint64_t* given_at) const;
  // Set with the views of `epoch` and the round each of their rings runs from (a ring of `views`
  // absent from `run_from` has none).
  std::string set(uint64_t epoch, const std::map<int, config::RingMembership>& views,
                  const std::map<int, uint64_t>& run_from);
  // A cross-cluster ring completed `rounds` rounds (compute thread), and what every ring has
  // completed so far (Node.ringRounds, RPC thread).
  void completed(int ring, uint64_t rounds);
  std::map<int, uint64_t> completed() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool coordinated_ = false;
  bool ended_ = false;
  uint64_t epoch_ = 0;
  std::map<int, config::RingMembership> views_;  // by ring id; without parameters
  struct RunFrom {
    uint64_t epoch = 0;
    uint64_t round = 0;
  };
  std::map<int, RunFrom> run_from_;     // by ring id
  std::map<int, uint64_t> completed_;  // by ring id
};

}  // namespace ravnest::daemon
