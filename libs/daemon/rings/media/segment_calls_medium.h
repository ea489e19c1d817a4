// SegmentCallsMedium: every segment a RingSink.segment call on the next member (ring_medium.h),
// the medium that always works, between any two daemons, and the one a link falls back to.
//
// send() hands the segment to the RPC thread (one hop, RingSinkCalls::call); the message refers
// to the caller's memory instead of copying it (when it is 8-byte aligned and sized), which
// flush() keeps in use until the next member took it. The receiver's RingSinkServer
// (ring_sink_server.h) leaves the bytes in its RingMailbox, where they stay in the call's message
// until the all-reduce took them; then the call is answered.
#pragma once

#include <memory>

#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rings/media/ring_sink_calls.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

// The RingSink.segment call for `tag` (on the RPC thread), counting its bytes in `traffic`.
kj::Promise<void> send_segment_call(schema::RingSink::Client& sink, const ring::RingTag& tag,
                                    const void* data, size_t bytes, wire::WireTraffic& traffic);

class SegmentCallsMedium final : public RingMedium {
 public:
  SegmentCallsMedium(std::unique_ptr<RingSinkCalls> sink, wire::WireTraffic& traffic)
      : sink_(std::move(sink)), traffic_(traffic) {}

  const char* name() const override { return "segment calls"; }
  void send(const ring::RingTag& tag, const void* data, size_t bytes, bool relayable,
            const wire::SealedFrame* kept) override;
  void flush() override { sink_->flush(); }

 private:
  std::unique_ptr<RingSinkCalls> sink_;
  wire::WireTraffic& traffic_;
};

}  // namespace ravnest::daemon
