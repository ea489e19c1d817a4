// RingLink: the RingTransport of one ring member over the daemons' connections.
//
// Runs on a thread of its own (a ring's, or the compute thread), never the RPC thread: each call
// below blocks on RpcThread::call or on a socket.
//
// Sending: the link opens the ring on the next member at its first send (and again after its
// medium failed) through RingOpener, which chooses the medium once per open (media/ring_medium.h:
// segment calls, shared memory or a data channel); send(), flush() and confirm_delivered() hand
// every segment to that medium. What stays here is the ring's: the errors' names (the next
// member, the ring), and, when a medium's own connection broke, dropping it (the next reduce
// opens the ring anew) and preferring the ring's abort reason, which names the member that
// failed first.
//
// Receiving: recv() waits in the node's RingMailbox for the segment (left there by the RPC
// thread, from a segment call or a slot of shared memory) or for the ring's data channel (then
// read on this thread, straight into place; recv_pieces() adds it piece by piece), whichever the
// previous member's medium delivers, checking every second that the previous member still
// answers, so a member that died is named within seconds and nobody hangs; recv_in_place() lets
// the all-reduce add straight from the received message. A call that fails drops the connection
// it went over (wire::PeerLinks::watch): the ring set up at the next reduce, or the next job,
// connects anew.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libs/daemon/rings/media/data_channel_medium.h"
#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rings/media/ring_opener.h"
#include "libs/daemon/rings/relay_store.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/ring/ring_transport.h"
#include "libs/wire/data_channel.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

class RingLink final : public ring::RingTransport {
 public:
  // `traffic` counts the segments sent; `rpc` is where the connections live (its timer bounds
  // the waits for answers).
  RingLink(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic, RingMailbox& mailbox, uint32_t ring, int self_node,
           RingPeerAddress next, RingPeerAddress prev, size_t in_flight = 2,
           uint64_t shared_slot_bytes = 0, ChannelMode channels = ChannelMode::kOff);

  ~RingLink() noexcept(false) override;  // the medium lets its sink go on the RPC thread

  void send(const ring::RingTag& tag, const void* data, size_t bytes) override;
  // The all-gather's segments: a medium that seals (a sealed data channel) seals them once, under
  // a key of their own, at the member that finished them; the members that pass them on keep
  // them as they came over a sealed channel (at most kMaxKept a link, their memory reused) and
  // hand them to their own medium to relay. Anything else goes as send() sends it.
  void send_relayable(const ring::RingTag& tag, const void* data, size_t bytes) override;
  void recv_to_relay(const ring::RingTag& tag, void* data, size_t bytes) override;
  void relay(const ring::RingTag& received, const ring::RingTag& tag, const void* data,
             size_t bytes) override;
  void recv(const ring::RingTag& tag, void* data, size_t bytes) override;
  void recv_in_place(const ring::RingTag& tag, size_t bytes,
                     const std::function<void(const void*)>& use) override;
  void recv_pieces(const ring::RingTag& tag, size_t bytes,
                   const std::function<void(size_t, const void*, size_t)>& use) override;
  void flush() override;
  void confirm_delivered() override;

  // Segments kept to relay at a time (relay_store.h): the sender passes a segment on about when
  // the next one arrives, but on shared cores it falls behind by a few; past kMaxKept buffers a
  // segment is sealed again instead (4 kept 86 % of the relays at N = 4, 64 MiB, on 2 cores).
  // Memory stays bounded: four segments' sealed bytes a link at most, 16 MiB at the daemons'
  // 4 MiB segments (the memory probe counts them: training/memory_probe.cpp).
  static constexpr size_t kMaxKept = 4;

 private:
  // send(), send_relayable() (`relayable`) and relay() (`kept`, when it holds a frame): opens the
  // ring when no medium is open, then hands the segment to the medium.
  void send_segment(const ring::RingTag& tag, const void* data, size_t bytes, bool relayable,
                    const wire::SealedFrame* kept);
  // Throws RingError naming the previous member when it does not answer a status call in 3 s.
  void check_prev_alive();
  // A data channel failed: throws the ring's abort reason if one arrives within 2 s (it names
  // the member that failed first), else `otherwise`.
  [[noreturn]] void throw_abort_or(uint64_t round, const ring::RingError& otherwise);
  // Waits for the segment `tag` in the mailbox (handing it to `from_message`) or for the ring's
  // data channel (then `from_channel` reads it there, with the idle checks).
  void receive(const ring::RingTag& tag, size_t bytes,
               const std::function<void(const void*)>& from_message,
               const std::function<void(wire::DataChannel&, const wire::DataChannel::Idle&)>&
                   from_channel);
  RpcThread& rpc_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RingMailbox& mailbox_;
  uint32_t ring_;
  RingPeerAddress next_;
  RingPeerAddress prev_;
  RingOpener opener_;
  // The sending thread's (flush() and confirm_delivered() run once it is drained): null until
  // the first send, and again once a medium failed.
  std::unique_ptr<RingMedium> medium_;
  uint64_t last_round_ = 0;          // of the last segment sent, for confirm_delivered()
  std::vector<uint8_t> in_place_;  // recv_in_place's segment from a channel; the ring thread's
  // Received to relay (ring thread) and taken by relay() (sender thread); flush() empties it.
  RelayStore relays_{kMaxKept};
};

}  // namespace ravnest::daemon
