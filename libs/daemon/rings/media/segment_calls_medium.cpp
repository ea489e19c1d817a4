#include "libs/daemon/rings/media/segment_calls_medium.h"

#include <cstdint>

#include <capnp/orphan.h>

namespace ravnest::daemon {

kj::Promise<void> send_segment_call(schema::RingSink::Client& sink, const ring::RingTag& tag,
                                    const void* data, size_t bytes, wire::WireTraffic& traffic) {
  auto request = sink.segmentRequest();
  request.setRound(tag.round);
  request.setStep(tag.step);
  request.setSegment(tag.segment);
  const capnp::Data::Reader view(static_cast<const kj::byte*>(data), bytes);
  if (reinterpret_cast<uintptr_t>(data) % 8 == 0 && bytes % 8 == 0) {
    // No copy: flush() keeps the memory in use until the receiver has taken it.
    auto orphanage = capnp::Orphanage::getForMessageContaining(
        static_cast<schema::RingSink::SegmentParams::Builder>(request));
    request.adoptData(orphanage.referenceExternalData(view));
  } else {
    request.setData(view);  // the message's words would run past the caller's bytes
  }
  traffic.sent(wire::TrafficKind::kRings, request.totalSize().wordCount * 8);
  return request.send().ignoreResult();
}

void SegmentCallsMedium::send(const ring::RingTag& tag, const void* data, size_t bytes,
                              bool /*relayable*/, const wire::SealedFrame* /*kept*/) {
  sink_->call([&](schema::RingSink::Client& sink) {
    return send_segment_call(sink, tag, data, bytes, traffic_);
  });
}

}  // namespace ravnest::daemon
