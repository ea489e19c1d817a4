// RingMember: this node as a member of its plan's all-reduce rings. It owns the mailbox its
// previous members' segments arrive in (Node.openRing returns a sink into it, Node.abortReduce
// ends a reduce that cannot finish) and runs the worker's reduces over RingLinks (reduce_rings).
//
// openRing and abortReduce run on the RPC thread; reduce_rings on the compute thread, blocking it
// until every ring is done; when one fails, the ring's other members are told.
#pragma once

#include <cstdint>
#include <vector>

#include "libs/config/node_metadata.h"
#include "libs/daemon/background_tasks.h"
#include "libs/daemon/node_calls.h"
#include "libs/daemon/node_secret.h"
#include "libs/daemon/ring_mailbox.h"
#include "libs/daemon/thread_bridge.h"
#include "libs/daemon/worker_port.h"
#include "libs/ring/ring_allreduce.h"
#include "libs/wire/peer_links.h"

namespace ravnest::runtime {

// Segments between daemons: each one costs two thread hops and a call, so they are larger than
// the algorithm's default. RAVNEST_RING_SEGMENT_BYTES overrides it (for benchmarks).
RingAllReduceOptions daemon_ring_options();

class RingMember {
 public:
  RingMember(const NodeSecret& secret, wire::PeerLinks& links, const RpcLoop& loop)
      : secret_(secret), links_(links), loop_(loop) {}

  RingMailbox& mailbox() { return mailbox_; }

  kj::Promise<void> open_ring(OpenRingCall context);
  kj::Promise<void> abort_reduce(AbortReduceCall context);

  // WorkerPort::reduce_rings for the node `self`.
  void reduce_rings(uint64_t round, std::vector<WorkerPort::RingWork>& work, bool average,
                    const config::NodeMetadata& self);

 private:
  const NodeSecret& secret_;
  wire::PeerLinks& links_;
  const RpcLoop& loop_;
  RingMailbox mailbox_;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::runtime
