// RingMember: this node as a member of its plan's all-reduce rings. It owns the mailbox its
// previous members' segments arrive in (Node.openRing returns a sink into it, Node.abortReduce
// ends a reduce that cannot finish) and runs the worker's reduces (reduce_rings).
//
// Rings are set up once and run many times, as Gloo's algorithms are: a ring's RingLink (with
// the stream into its next member), its RingAllReduce (with its sender thread and buffers) and,
// when the node runs several rings at once, a thread of the ring's own are made at the ring's
// first reduce of a job and kept until the job ends (end_job) or the ring fails (then the next
// reduce sets it up again, over a fresh connection).
//
// openRing and abortReduce run on the RPC thread; reduce_rings and end_job on the compute thread,
// reduce_rings blocking it until every ring is done; when one fails, the ring's other members are
// told.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libs/wire/stream_limits.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/daemon/rings/ring_link.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/membership/ring_views.h"
#include "libs/membership/epoch_round.h"
#include "libs/membership/ring_membership.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/worker/worker_port.h"
#include "libs/ring/ring_allreduce.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

// Segments between daemons: each one costs two thread hops and a call, so they are larger than
// the algorithm's default. RAVNEST_RING_SEGMENT_BYTES overrides it (for benchmarks).
ring::RingAllReduceOptions daemon_ring_options();
// Unanswered segment calls per link (media/ring_sink_calls.h): two keep the link busy while the
// receiver adds. RAVNEST_RING_IN_FLIGHT overrides it (for benchmarks).
size_t daemon_ring_in_flight();
// The slots a ring link offers to a next member on this host (media/shared_memory_medium.h):
// one segment each; 0 when the daemon config's `shared_memory` is off.
uint64_t daemon_ring_shared_slot_bytes(bool shared_memory);
// How this daemon's ring links offer data channels (media/data_channel_medium.h): sealed with
// TLS, plain under --insecure; RAVNEST_RING_CHANNELS=0 turns them off (to measure the RPC path).
ChannelMode daemon_ring_channels(bool insecure);

class RingMember {
 public:
  // `traffic` counts the segments either way. `shared_memory`: offer and accept shared memory
  // for the segments to and from members on this host (the daemon config's `shared_memory`).
  // `insecure`: the daemon runs --insecure, so its links offer plain data channels and it
  // accepts them; with TLS it accepts only sealed ones.
  RingMember(wire::PeerLinks& links, wire::WireTraffic& traffic, RpcThread& rpc,
             bool shared_memory = true, bool insecure = false);
  ~RingMember();

  RingMailbox& mailbox() { return mailbox_; }

  // `slot` counts the ring's sink against its peer's limit until the peer releases it.
  kj::Promise<void> open_ring(OpenRingCall context, wire::StreamSlot slot);
  kj::Promise<void> abort_reduce(AbortReduceCall context);
  // A data channel's connection (wire::RpcServer's on_data_channel), RPC thread: "" when
  // `token` was offered in an openRing here and not used yet (the channel is then its ring's),
  // else why not. Owns `fd` either way.
  std::string accept_channel(const std::string& token, int fd, const std::string& peer);

  // How long a failed cross-cluster reduce of a coordinated job waits for the requester's new
  // membership before it fails the job (the requester names a dead node after 6 s of silence).
  static constexpr int kMembershipWaitSeconds = 30;

  // The job's ring membership (setRings), reset with the mailbox by a new job.
  RingViews& views() { return views_; }

  // WorkerPort::reduce_rings for the node `self`. In a job whose membership the requester
  // coordinates (ring_views.h), a failed cross-cluster reduce waits for a new membership and
  // runs again, from the values it started from, over the clusters left, from the round the
  // requester names (a member that completed the round before runs that one again first).
  void reduce_rings(uint64_t round, std::vector<worker::WorkerPort::RingWork>& work, bool average,
                    const config::NodeMetadata& self);
  // Lets the job's rings go (their links, threads and buffers). Compute thread.
  void end_job();
  size_t rings_set_up() const { return sessions_.size(); }  // for tests and logs

 private:
  class Session;
  Session& session_for(const config::RingMembership& ring, const config::NodeMetadata& self);
  // Before this round's attempt over membership `epoch`: the cross-cluster rings of `work` still
  // `pending` whose coordinator says they run from the round before (round_to_run) run it again
  // from their kept inputs (the results go); returns the first error, or "".
  std::string catch_up(uint64_t round, std::vector<worker::WorkerPort::RingWork>& work,
                       const std::vector<config::RingMembership>& seen,
                       const std::vector<bool>& pending, bool average,
                       const config::NodeMetadata& self, uint64_t epoch);
  // One attempt at round `at.round` over the memberships `seen` of epoch `at.epoch` (one per
  // work item) of the items still `pending` (those that succeed are no longer); returns the
  // first error, or "".
  std::string try_reduce(membership::EpochRound at, std::vector<worker::WorkerPort::RingWork>& work,
                         const std::vector<config::RingMembership>& seen,
                         std::vector<bool>& pending, bool average,
                         const config::NodeMetadata& self);
  void tell_members(const config::RingMembership& ring, const std::string& reason,
                    const config::NodeMetadata& self, uint64_t epoch);

  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RpcThread& rpc_;
  const bool shared_memory_;
  const bool insecure_;
  // Channels offered in openRing and not connected yet, by token; the RPC thread's. At most
  // 256 (ring_member.cpp); one offer per ring, the newest.
  struct OfferedChannel {
    uint32_t ring;
    std::string key;
    std::string from;  // "node_3", for messages
  };
  std::map<std::string, OfferedChannel> offered_channels_;
  RingMailbox mailbox_;
  RingViews views_;
  std::map<int, std::unique_ptr<Session>> sessions_;  // by ring id; compute thread only
  // Coordinated jobs, compute thread: the inputs of the last round each cross-cluster ring
  // completed, kept until its next round completes (a member that completed a round its
  // neighbour failed runs it again from them: membership::round_to_run), and the newest
  // membership epoch whose round to run from (RingViews::run_from) each ring has followed.
  struct KeptRound {
    uint64_t round = 0;
    std::vector<at::Tensor> tensors;
  };
  std::map<int, KeptRound> kept_rounds_;
  std::map<int, uint64_t> run_from_followed_;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::daemon
