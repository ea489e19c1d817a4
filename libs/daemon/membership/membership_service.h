// MembershipService: the daemon's side of elastic membership (docs/faults.md#providers-that-come-
// and-go): the Node methods through which the requester that follows a job of several clusters
// changes the rings' membership when a cluster drops or joins. setRings sets the job's
// RingViews (ring_views.h, which RingMember's reduces follow) and ends the reduces of the older
// membership; ringRounds answers how many rounds each cross-cluster ring completed, so that the
// requester names the round every member runs from. The decisions are libs/membership's; the
// messages are decoded by libs/wire/membership_codec.h. JobControl only answers whether a job is
// this node's.
//
// RPC thread; it never waits for the compute thread (a reduce may be blocked on the new
// membership that setRings brings).
#pragma once

#include <kj/async.h>

#include "libs/daemon/job/job_control.h"
#include "libs/daemon/rings/ring_member.h"
#include "libs/daemon/rpc/node_calls.h"

namespace ravnest::daemon {

class MembershipService {
 public:
  MembershipService(JobControl& job, RingMember& rings) : job_(job), rings_(rings) {}

  // Node.setRings: epoch 0 says the requester coordinates the job's membership (other
  // clusters' ring peers are no longer watched); a higher epoch's views replace those of their
  // rings, and the reduces of the older epochs on those rings end (and run again over the new
  // one). Refused, changing nothing, for another job, one not loaded or training, a malformed
  // view (membership_codec.h), a ring not this node's, or an epoch not above the current one.
  kj::Promise<void> set_rings(SetRingsCall context);
  // Node.ringRounds: the rounds this node's cross-cluster rings completed in the running job,
  // answered while the compute thread may wait in a reduce. Refused for another job.
  kj::Promise<void> ring_rounds(RingRoundsCall context);

 private:
  JobControl& job_;
  RingMember& rings_;
};

}  // namespace ravnest::daemon
