// Which medium a ring link's segments take (ring_medium.h), decided once per open of the ring on
// plain data: what the sending member offered in Node.openRing, what the receiving member could
// take of it, and so what both then use. Pure functions; no I/O (mapping the offered memory,
// connecting the channel happen around them: RingMember::open_ring, RingOpener::open).
//
// The order of preference, which both ends follow: shared memory (the receiver runs on the same
// host and mapped the sender's memory), then a data channel (the sender offered one this
// receiver takes), then segment calls, which always work. A channel that cannot be connected
// once chosen leaves the link on segment calls over the same sink (RingOpener::open), which the
// receiver takes as it takes every call: its mailbox takes segments from either (ring_mailbox.h).
#pragma once

#include <array>
#include <cstddef>
#include <string>

namespace ravnest::daemon {

enum class RingMediumKind { kSharedMemory, kDataChannel, kSegmentCalls };

inline constexpr std::array<RingMediumKind, 3> kMediumPreference = {
    RingMediumKind::kSharedMemory, RingMediumKind::kDataChannel, RingMediumKind::kSegmentCalls};

// "shared memory", "data channel", "segment calls".
const char* medium_name(RingMediumKind kind);

// What an openRing carried, as its receiver sees it.
struct MediaOffered {
  bool shared_memory = false;  // an offer of the sender's memory was made
  bool data_channel = false;   // a data channel was offered
  size_t channel_token_bytes = 0;
  size_t channel_key_bytes = 0;  // 0: a plain channel (--insecure on the sender)
};

// What the receiving daemon can take.
struct ReceiverMedia {
  bool shared_memory_mapped = false;  // the offered memory was mapped (the config allows it,
                                      // and it is this host's: SharedSegmentsReader::open)
  bool channels_on = false;           // daemon_ring_channels() is not kOff
  bool insecure = false;              // the daemon runs --insecure: plain channels are fine
};

// The receiver's answer (Node.openRing's sharedAccepted, channelAccepted).
struct MediaAccepted {
  bool shared_memory = false;
  bool data_channel = false;
  // Why an offered channel was not taken when it was well-formed to look at ("" otherwise): for
  // the receiver's debug log.
  std::string channel_refusal;
};

// The receiver's side, in RingMember::open_ring: shared memory when mapped; else an offered
// channel whose token has kChannelTokenBytes and whose key has kChannelKeyBytes (or none, and
// this daemon runs --insecure: with TLS a plain channel would send in the clear what TLS
// protects), when channels are on.
MediaAccepted accept_media(const MediaOffered& offered, const ReceiverMedia& receiver);

// The sender's side, in RingOpener::open: the first medium of kMediumPreference that was both
// offered and accepted; segment calls when nothing else was.
RingMediumKind choose_medium(const MediaOffered& offered, const MediaAccepted& accepted);

}  // namespace ravnest::daemon
