// Which medium a ring link's segments take (libs/daemon/rings/media/media_choice.h): the
// receiver's answer to an openRing's offers, and the sender's choice from that answer, on plain
// data, both ends in the order of preference shared memory, data channel, segment calls.
#include <catch2/catch.hpp>

#include "libs/daemon/rings/media/media_choice.h"
#include "libs/wire/data_channel.h"

using namespace ravnest;
using daemon::MediaAccepted;
using daemon::MediaOffered;
using daemon::ReceiverMedia;
using daemon::RingMediumKind;

namespace {

MediaOffered offer(bool shared, bool channel, size_t key_bytes = wire::kChannelKeyBytes,
                   size_t token_bytes = wire::kChannelTokenBytes) {
  MediaOffered o;
  o.shared_memory = shared;
  o.data_channel = channel;
  if (channel) {
    o.channel_token_bytes = token_bytes;
    o.channel_key_bytes = key_bytes;
  }
  return o;
}

// Both ends of one open: what the receiver answers, then what the sender uses.
RingMediumKind open(const MediaOffered& offered, const ReceiverMedia& receiver) {
  return daemon::choose_medium(offered, daemon::accept_media(offered, receiver));
}

}  // namespace

TEST_CASE("ring media: the receiver takes shared memory first, then a channel", "[ring_media]") {
  const ReceiverMedia tls{/*shared_memory_mapped=*/true, /*channels_on=*/true, /*insecure=*/false};
  auto both = daemon::accept_media(offer(true, true), tls);
  CHECK(both.shared_memory);
  CHECK_FALSE(both.data_channel);  // one medium per open

  ReceiverMedia other_host = tls;
  other_host.shared_memory_mapped = false;  // the offer named nothing here
  auto channel = daemon::accept_media(offer(true, true), other_host);
  CHECK_FALSE(channel.shared_memory);
  CHECK(channel.data_channel);
  CHECK(channel.channel_refusal.empty());

  auto nothing = daemon::accept_media(offer(false, false), tls);
  CHECK_FALSE(nothing.shared_memory);
  CHECK_FALSE(nothing.data_channel);
  CHECK(nothing.channel_refusal.empty());
}

TEST_CASE("ring media: which channels a receiver refuses, and why", "[ring_media]") {
  const ReceiverMedia tls{false, true, false};
  const ReceiverMedia insecure{false, true, true};
  // A plain channel (no key) only between daemons that both run --insecure.
  auto plain_to_tls = daemon::accept_media(offer(false, true, 0), tls);
  CHECK_FALSE(plain_to_tls.data_channel);
  CHECK(plain_to_tls.channel_refusal == "plain, and this daemon speaks TLS");
  CHECK(daemon::accept_media(offer(false, true, 0), insecure).data_channel);
  CHECK(daemon::accept_media(offer(false, true), insecure).data_channel);  // sealed is fine too

  auto short_token = daemon::accept_media(offer(false, true, wire::kChannelKeyBytes, 16), tls);
  CHECK_FALSE(short_token.data_channel);
  CHECK(short_token.channel_refusal == "a token of another size");
  auto short_key = daemon::accept_media(offer(false, true, 16), tls);
  CHECK_FALSE(short_key.data_channel);
  CHECK(short_key.channel_refusal == "plain, and this daemon speaks TLS");

  // RAVNEST_RING_CHANNELS=0 on the receiver: refused without a word.
  auto off = daemon::accept_media(offer(false, true), {false, false, false});
  CHECK_FALSE(off.data_channel);
  CHECK(off.channel_refusal.empty());
}

TEST_CASE("ring media: the sender uses what it offered and the receiver took", "[ring_media]") {
  const ReceiverMedia same_host{true, true, false};
  const ReceiverMedia other_host{false, true, false};
  CHECK(open(offer(true, true), same_host) == RingMediumKind::kSharedMemory);
  CHECK(open(offer(true, true), other_host) == RingMediumKind::kDataChannel);
  CHECK(open(offer(false, true), same_host) == RingMediumKind::kDataChannel);
  CHECK(open(offer(true, false), other_host) == RingMediumKind::kSegmentCalls);
  CHECK(open(offer(false, false), same_host) == RingMediumKind::kSegmentCalls);
  CHECK(open(offer(false, true, 0), other_host) == RingMediumKind::kSegmentCalls);

  // An answer that claims what was not offered changes nothing.
  MediaAccepted claims;
  claims.shared_memory = true;
  claims.data_channel = true;
  CHECK(daemon::choose_medium(offer(false, false), claims) == RingMediumKind::kSegmentCalls);
  CHECK(daemon::choose_medium(offer(false, true), claims) == RingMediumKind::kDataChannel);
  // Both accepted (an older receiver might say so): shared memory, first in the preference.
  CHECK(daemon::choose_medium(offer(true, true), claims) == RingMediumKind::kSharedMemory);
}

TEST_CASE("ring media: every medium has a name, in the order of preference", "[ring_media]") {
  REQUIRE(daemon::kMediumPreference.size() == 3);
  CHECK(std::string(daemon::medium_name(daemon::kMediumPreference[0])) == "shared memory");
  CHECK(std::string(daemon::medium_name(daemon::kMediumPreference[1])) == "data channel");
  CHECK(std::string(daemon::medium_name(daemon::kMediumPreference[2])) == "segment calls");
}
