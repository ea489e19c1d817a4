// BenchService: Node.benchAllReduce, the all-reduce benchmark between daemons (`ravnest bench`).
// Each call runs one ring over the node's connections on a thread of its own, apart from the rings
// of any plan, and answers with the seconds of each repetition after a warm-up.
//
// RPC thread only; the mailbox is reset at every call, so do not bench while a job reduces.
#pragma once

#include "libs/daemon/rpc/node_calls.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

class BenchService {
 public:
  // The benchmark's segments count as the node's ring traffic (`traffic`).
  // `shared_memory`: offer the next daemon shared memory when it runs on this host, as the
  // node's rings do.
  BenchService(wire::PeerLinks& links, wire::WireTraffic& traffic, RingMailbox& mailbox,
               const RpcLoop& loop, bool shared_memory)
      : links_(links), traffic_(traffic), mailbox_(mailbox), loop_(loop),
        shared_memory_(shared_memory) {}

  kj::Promise<void> bench_all_reduce(BenchAllReduceCall context);

 private:
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RingMailbox& mailbox_;
  const RpcLoop& loop_;
  bool shared_memory_;
};

}  // namespace ravnest::daemon
