// SharedMemoryMedium: a ring's segments to a next member on this host through memory both map
// (shared_segments.h), announced by RingSink.sharedSegment calls (ring_medium.h). The sender
// copies a segment into a slot and calls; the receiver's RingSinkServer (ring_sink_server.h) leaves
// the slot's bytes in its RingMailbox, where the all-reduce reads them where they lie, and the
// call is answered once it did. A segment larger than a slot goes as a segment call
// (segment_calls_medium.h) over the same sink.
//
// The slots are the window of unanswered calls (RingSinkCalls): on entry to send() fewer than
// `in_flight` calls are unanswered, so the call `in_flight` before this one, the slot's previous
// user, has been answered, and the receiver no longer reads the slot.
#pragma once

#include <cstdint>
#include <memory>

#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rings/media/ring_sink_calls.h"
#include "libs/daemon/rings/shared_segments.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

// Writes `offer` into openRing's `shared` field (RPC thread).
void offer_shared_memory(schema::SharedSegments::Builder into, const SharedSegmentsOffer& offer);

class SharedMemoryMedium final : public RingMedium {
 public:
  // `memory` is the link's (RingOpener's), offered in the open that chose this medium.
  SharedMemoryMedium(std::unique_ptr<RingSinkCalls> sink, SharedSegmentsWriter& memory,
                     wire::WireTraffic& traffic)
      : sink_(std::move(sink)), memory_(memory), traffic_(traffic) {}

  const char* name() const override { return "shared memory"; }
  void send(const ring::RingTag& tag, const void* data, size_t bytes, bool relayable,
            const wire::SealedFrame* kept) override;
  void flush() override { sink_->flush(); }

 private:
  std::unique_ptr<RingSinkCalls> sink_;
  SharedSegmentsWriter& memory_;
  wire::WireTraffic& traffic_;
  uint64_t calls_ = 0;  // calls made; names the next slot
};

}  // namespace ravnest::daemon
