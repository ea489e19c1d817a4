// DataChannelMedium: a ring's segments to the next member over a TCP connection of the link's own
// (wire/data_channel.h), plain or sealed (ring_medium.h). send() writes the segment into the
// socket on the sending thread, sealed there with TLS on, and returns once the kernel holds it:
// no RPC per segment, TCP is the flow control. A sealed channel passes on the all-gather's
// segments it received sealed (`kept`) unchanged instead of sealing them again.
// confirm_delivered() waits until the next member acknowledged every segment (a reduce ends only
// once the next member took it all); flush() has nothing to wait for.
//
// The receiving member's daemon hands the connection to the ring's RingMailbox (RingMember::
// accept_channel); its ring thread reads the segments there, straight into place (RingLink::
// recv, recv_pieces).
//
// Every wait on the socket checks the node's mailbox for the ring's abort; a failure of the
// channel (or the abort) throws MediumBroken, and RingLink then names the ring's abort reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rings/media/ring_sink_calls.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/wire/data_channel.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

// Whether a ring link offers the next member a data channel, and sealed or plain: sealed when
// the daemons speak TLS, plain when they run --insecure, or none (every segment an RPC call, as
// before data channels; RAVNEST_RING_CHANNELS=0, for comparisons).
enum class ChannelMode { kOff, kPlain, kSealed };

// What one open offers: a fresh token (a token opens one connection) and, sealed, a fresh key (a
// key seals one channel). The key is wiped once the channel is connected or given up.
struct ChannelOffer {
  std::string token;
  std::string key;  // empty: plain
};
ChannelOffer draw_channel_offer(ChannelMode mode);  // mode != kOff
// Writes `offer` into openRing's `channel` field (RPC thread).
void offer_data_channel(schema::DataChannelOffer::Builder into, const ChannelOffer& offer);

class DataChannelMedium final : public RingMedium {
 public:
  // `sink`: the ring's sink on the next member, kept open while the channel carries the segments.
  DataChannelMedium(std::unique_ptr<RingSinkCalls> sink, std::unique_ptr<wire::DataChannel> out,
                    RingMailbox& mailbox, uint32_t ring, wire::WireTraffic& traffic)
      : sink_(std::move(sink)), out_(std::move(out)), mailbox_(mailbox), ring_(ring),
        traffic_(traffic) {}

  const char* name() const override { return "data channel"; }
  void send(const ring::RingTag& tag, const void* data, size_t bytes, bool relayable,
            const wire::SealedFrame* kept) override;
  void flush() override {}
  void confirm_delivered(uint64_t round) override;

 private:
  std::unique_ptr<RingSinkCalls> sink_;
  std::unique_ptr<wire::DataChannel> out_;  // after sink_: shut down first
  RingMailbox& mailbox_;
  uint32_t ring_;
  wire::WireTraffic& traffic_;
};

}  // namespace ravnest::daemon
