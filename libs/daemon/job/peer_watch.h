// PeerWatch: while this node runs a job, it asks each of the job's peers (its pipeline neighbours
// and its ring members) for their status every second. A peer that gives no answer for
// kSilenceSeconds (dead, frozen by SIGSTOP, cut off), answers that it no longer runs the job
// (restarted), or that the job failed there, fails the job here, naming the peer. A peer that
// answers that it dropped the job (idle with the job's id: only a stop does that) stops it here
// too, with the reason the peer keeps (the requester's, or the failure it stopped after): the
// stop this node missed (it was frozen, or cut off, when the requester sent it; over TLS a stop
// cannot wait in a socket for a frozen daemon, the handshake needs it awake). So a silent peer is
// named within seconds even when no transfer is pending and nobody is attached, and a node that
// was frozen and continues learns that its job is over.
//
// RPC thread only. watch() replaces what was watched; watching ends by itself once `running`
// says the job is over.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <kj/async.h>

#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/wire/peer_links.h"

namespace ravnest::daemon {

class PeerWatch {
 public:
  static constexpr double kSilenceSeconds = 6;

  struct Peer {
    std::string name;  // "node_2"
    std::string address;
  };

  PeerWatch(wire::PeerLinks& links, RpcThread& rpc) : links_(links), rpc_(rpc) {}

  // `fail(why)`: the job fails here; `stopped(reason)`: the requester stopped it (the reason it
  // gave). At most one of them, once.
  void watch(uint64_t job_id, std::vector<Peer> peers, std::function<bool()> running,
             std::function<void(const std::string&)> fail,
             std::function<void(const std::string&)> stopped);
  void stop() { canceler_.cancel("no longer watched"); }
  // No longer watches the peers at `addresses` (ring members of other clusters, once the
  // requester coordinates the rings' membership: setRings).
  void forget(const std::set<std::string>& addresses);

 private:
  kj::Promise<void> tick();
  kj::Promise<void> ask(const Peer& peer);
  void report(const std::string& why);  // fails the job once
  void report_stopped(const std::string& reason);

  wire::PeerLinks& links_;
  RpcThread& rpc_;
  uint64_t job_id_ = 0;
  std::vector<Peer> peers_;
  std::map<std::string, double> last_answer_;  // by address, seconds
  std::function<bool()> running_;
  std::function<void(const std::string&)> fail_;
  std::function<void(const std::string&)> stopped_;
  bool failed_ = false;
  kj::Canceler canceler_;
  BackgroundTasks tasks_;  // last: dropped before the canceler and what the tasks use
};

}  // namespace ravnest::daemon
