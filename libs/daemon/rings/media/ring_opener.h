// RingOpener: opens a ring link's ring on its next member (Node.openRing) and returns the medium
// its segments then take (ring_medium.h): the one place the medium is chosen, once per open.
//
// Each open offers what this link has, in kMediumPreference's order (media_choice.h): its shared
// memory (made once per link, when the daemon allows it), and a data channel (fresh token and
// key, when channels are on). With nothing to offer the sink is pipelined and segments follow at
// once; otherwise the answer is awaited (10 s at most), choose_medium() picks, and a chosen data
// channel is connected; a channel that cannot be connected leaves the link on segment calls.
//
// Threads: open() on the ring's sending thread, blocking on RpcThread::call (and on the
// channel's connect); never on the RPC thread. Throws the kj::Exception of an openRing that
// failed or got no answer (RingLink names the peer).
#pragma once

#include <cstdint>
#include <memory>

#include "libs/daemon/rings/media/data_channel_medium.h"
#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rings/shared_segments.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

class RingOpener {
 public:
  // `in_flight`: the window of unanswered calls (ring_sink_calls.h); `shared_slot_bytes`: a
  // slot's size, 0 for no shared memory (and when it cannot be made: a warning, then none).
  RingOpener(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
             RingMailbox& mailbox, uint32_t ring, int self_node, RingPeerAddress next,
             size_t in_flight, uint64_t shared_slot_bytes, ChannelMode channels);

  std::unique_ptr<RingMedium> open();

 private:
  RpcThread& rpc_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RingMailbox& mailbox_;
  uint32_t ring_;
  int self_node_;
  RingPeerAddress next_;
  size_t in_flight_;
  std::unique_ptr<SharedSegmentsWriter> shared_;  // null: not offered
  ChannelMode channels_;
  bool channel_logged_ = false;
};

}  // namespace ravnest::daemon
