#include "libs/daemon/rings/media/shared_memory_medium.h"

#include <cstring>

#include "libs/daemon/rings/media/segment_calls_medium.h"

namespace ravnest::daemon {

void offer_shared_memory(schema::SharedSegments::Builder into, const SharedSegmentsOffer& offer) {
  into.setPid(offer.pid);
  into.setFd(offer.fd);
  into.setNonce(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(offer.nonce.data()),
                                    offer.nonce.size()));
  into.setSlots(offer.slots);
  into.setSlotBytes(offer.slot_bytes);
}

void SharedMemoryMedium::send(const ring::RingTag& tag, const void* data, size_t bytes,
                              bool /*relayable*/, const wire::SealedFrame* /*kept*/) {
  const bool in_slot = bytes <= memory_.offer().slot_bytes;
  const uint32_t slot = static_cast<uint32_t>(calls_ % sink_->in_flight_limit());
  if (in_slot && bytes > 0) std::memcpy(memory_.slot(slot), data, bytes);
  ++calls_;
  sink_->call([&](schema::RingSink::Client& sink) -> kj::Promise<void> {
    if (!in_slot) return send_segment_call(sink, tag, data, bytes, traffic_);
    auto request = sink.sharedSegmentRequest();
    request.setRound(tag.round);
    request.setStep(tag.step);
    request.setSegment(tag.segment);
    request.setSlot(slot);
    request.setBytes(bytes);
    traffic_.sent(wire::TrafficKind::kRings, bytes);
    return request.send().ignoreResult();
  });
}

}  // namespace ravnest::daemon
