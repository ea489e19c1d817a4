// RingLink: the RingTransport of one ring member over the daemons' Cap'n Proto connections.
//
// Runs on a thread of its own (a ring's, or the compute thread), never the RPC thread: each call
// below blocks on RpcThread::call.
//
// Over a data channel (`channels` not kOff, the next member accepted it in openRing, and no
// shared memory): send() writes the segment into the channel's socket on the calling thread (the
// all-reduce's sender thread), sealed there with TLS on, and returns once the kernel holds it;
// the receiving member's recv() reads it on its ring thread, straight into place, and
// recv_pieces() adds it piece by piece. TCP is the flow control; confirm_delivered() waits until the
// next member acknowledged every segment (a reduce ends only once the next member took it all). A channel that cannot be
// connected leaves the segments to the RPC path below; a channel that fails fails the reduce,
// and the next reduce opens the ring anew.
//
// Otherwise send() calls RingSink.segment on the next member (one hop to the RPC thread; the
// message refers to the caller's memory instead of copying it) and returns at once while fewer
// than `in_flight` of its calls are unanswered, else when the oldest is: a segment's call is
// answered once the next member's all-reduce took its bytes, so at most `in_flight` segments
// wait there per ring and the link never idles while the receiver adds. flush() waits for every
// call; it drops the connection when it cannot tell. recv() waits in the node's RingMailbox (for
// the segment, or for the ring's data channel), checking every second that the previous member
// still answers, so a member that died is named within seconds and nobody hangs; recv_in_place()
// lets the all-reduce add straight from the received message. A call that fails drops the
// connection it went over (wire::PeerLinks::watch): the ring set up at the next reduce, or the
// next job, connects anew.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/timer.h>

#include "libs/daemon/rings/relay_store.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/daemon/rings/shared_segments.h"
#include "libs/ring/ring_transport.h"
#include "libs/wire/data_channel.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

// Whether a ring link offers the next member a data channel (wire/data_channel.h), and sealed or
// plain: sealed when the daemons speak TLS, plain when they run --insecure, or none (every
// segment an RPC call, as before data channels; RAVNEST_RING_CHANNELS=0, for comparisons).
enum class ChannelMode { kOff, kPlain, kSealed };

struct RingPeerAddress {
  std::string name;  // "node_3", for messages
  std::string address;
};

class RingLink final : public ring::RingTransport {
 public:
  // `traffic` counts the segments sent; `rpc` is where the connections live (its timer bounds
  // the waits for answers).
  RingLink(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic, RingMailbox& mailbox, uint32_t ring, int self_node,
           RingPeerAddress next, RingPeerAddress prev, size_t in_flight = 2,
           uint64_t shared_slot_bytes = 0, ChannelMode channels = ChannelMode::kOff);

  ~RingLink() noexcept(false) override;  // drops the sink on the RPC thread, where it lives

  void send(const ring::RingTag& tag, const void* data, size_t bytes) override;
  // Over a sealed data channel: the all-gather's segments sealed once, under a key of their own,
  // by the member that finished them; the members that pass them on keep them as they came (at
  // most kMaxKept a link, their memory reused) and relay the sealed bytes. Anything else (RPC,
  // shared memory, plain, a segment that was not kept) goes as send() sends it.
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
  // send(), send_relayable() (`relayable`) and relay() (`kept`, when it holds a frame).
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
  // After an open that offered a channel the next member accepted: connect it (else the RPC
  // path carries the segments).
  void connect_channel();
  // The failed data channel and the sink are let go: the next reduce opens the ring anew.
  void drop_out_channel();
  // Opens the ring on the next member when no sink is open; with shared memory, waits for its
  // answer to the offer.
  void open_sink();
  RpcThread& rpc_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  RingMailbox& mailbox_;
  uint32_t ring_;
  int self_node_;
  RingPeerAddress next_;
  RingPeerAddress prev_;
  size_t in_flight_limit_;
  // Both touched on the RPC thread only.
  kj::Maybe<schema::RingSink::Client> sink_;  // on the next member
  std::deque<kj::Promise<void>> in_flight_;   // the unanswered segment calls, oldest first
  std::unique_ptr<SharedSegmentsWriter> shared_;  // null: not offered
  bool shared_accepted_ = false;  // written on the RPC thread inside open_sink's call
  uint64_t calls_ = 0;            // segment calls made; names the next slot
  ChannelMode channels_;
  // The channel offered in the last open (token, key), and whether the next member took it:
  // written on the RPC thread inside open_sink's call, read after it on the sending thread.
  std::string channel_token_;
  std::string channel_key_;
  bool channel_accepted_ = false;
  std::unique_ptr<wire::DataChannel> out_;  // to the next member; the sending thread's
  uint64_t last_round_ = 0;  // of the last segment sent over out_, for flush()'s abort check
  bool channel_logged_ = false;
  std::vector<uint8_t> in_place_;  // recv_in_place's segment from a channel; the ring thread's
  // Received to relay (ring thread) and taken by relay() (sender thread); flush() empties it.
  RelayStore relays_{kMaxKept};
};

}  // namespace ravnest::daemon
