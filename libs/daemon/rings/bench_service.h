// BenchService: Node.benchAllReduce, the all-reduce benchmark between daemons (`ravnest bench`).
// Each call runs one ring over the node's connections on a thread of its own, apart from the rings
// of any plan, and answers with the seconds of each repetition after a warm-up. With a codec its
// segments travel as a job's `[compression] rings` do (RingCompression, error feedback).
//
// RPC thread only; the mailbox is reset when each call ends, so do not bench while a job
// reduces. The benchmarks' threads belong to the service: finish() ends them, and destroying the
// service joins them, so that none outlives what it uses.
#pragma once

#include "libs/daemon/rpc/node_calls.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rpc/owned_threads.h"
#include "libs/daemon/rpc/rpc_thread.h"
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
               RpcThread& rpc, bool shared_memory, bool insecure)
      : links_(links), traffic_(traffic), mailbox_(mailbox), rpc_(rpc),
        shared_memory_(shared_memory), insecure_(insecure) {}

  kj::Promise<void> bench_all_reduce(BenchAllReduceCall context);
  // At shutdown, before the service goes: aborts the benchmarks in flight (their ring's
  // mailbox) and resolves once each thread returned. Wait for it with the RPC loop running: a
  // benchmark's link calls the RPC thread on its way out.
  kj::Promise<void> finish();

 private:
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RingMailbox& mailbox_;
  RpcThread& rpc_;
  bool shared_memory_;
  bool insecure_;  // the links' data channels plain (ring_member.h: daemon_ring_channels)
  OwnedThreads threads_;  // last: joined before what the benchmarks use goes
};

}  // namespace ravnest::daemon
