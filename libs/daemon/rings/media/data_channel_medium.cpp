#include "libs/daemon/rings/media/data_channel_medium.h"

namespace ravnest::daemon {

ChannelOffer draw_channel_offer(ChannelMode mode) {
  ChannelOffer offer;
  offer.token = wire::random_bytes(wire::kChannelTokenBytes);
  if (mode == ChannelMode::kSealed) offer.key = wire::random_bytes(wire::kChannelKeyBytes);
  return offer;
}

void offer_data_channel(schema::DataChannelOffer::Builder into, const ChannelOffer& offer) {
  into.setToken(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(offer.token.data()),
                                    offer.token.size()));
  into.setKey(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(offer.key.data()),
                                  offer.key.size()));
}

void DataChannelMedium::send(const ring::RingTag& tag, const void* data, size_t bytes,
                             bool relayable, const wire::SealedFrame* kept) {
  try {
    const wire::ChannelFrame frame{tag.round, tag.step, tag.segment, bytes};
    const auto idle = [&]() { mailbox_.check_aborted(ring_, tag.round); };
    if (kept != nullptr && out_->sealed()) {
      out_->relay(frame, *kept, idle);
    } else {
      out_->send(frame, data, idle, relayable);
    }
  } catch (const std::exception& e) {
    throw MediumBroken(e.what());
  }
  traffic_.sent(wire::TrafficKind::kRings, bytes);
}

void DataChannelMedium::confirm_delivered(uint64_t round) {
  try {
    out_->wait_acknowledged([&]() { mailbox_.check_aborted(ring_, round); });
  } catch (const std::exception& e) {
    throw MediumBroken(e.what());
  }
}

}  // namespace ravnest::daemon
