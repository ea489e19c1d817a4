#include "libs/daemon/rings/media/media_choice.h"

#include "libs/wire/data_channel.h"

namespace ravnest::daemon {

const char* medium_name(RingMediumKind kind) {
  switch (kind) {
    case RingMediumKind::kSharedMemory:
      return "shared memory";
    case RingMediumKind::kDataChannel:
      return "data channel";
    case RingMediumKind::kSegmentCalls:
      return "segment calls";
  }
  return "segment calls";
}

MediaAccepted accept_media(const MediaOffered& offered, const ReceiverMedia& receiver) {
  MediaAccepted accepted;
  if (offered.shared_memory && receiver.shared_memory_mapped) {
    accepted.shared_memory = true;
    return accepted;
  }
  if (!offered.data_channel || !receiver.channels_on) return accepted;
  const bool key_ok = offered.channel_key_bytes == wire::kChannelKeyBytes ||
                      (offered.channel_key_bytes == 0 && receiver.insecure);
  if (offered.channel_token_bytes == wire::kChannelTokenBytes && key_ok) {
    accepted.data_channel = true;
  } else {
    accepted.channel_refusal =
        key_ok ? "a token of another size" : "plain, and this daemon speaks TLS";
  }
  return accepted;
}

RingMediumKind choose_medium(const MediaOffered& offered, const MediaAccepted& accepted) {
  for (RingMediumKind kind : kMediumPreference) {
    switch (kind) {
      case RingMediumKind::kSharedMemory:
        if (offered.shared_memory && accepted.shared_memory) return kind;
        break;
      case RingMediumKind::kDataChannel:
        if (offered.data_channel && accepted.data_channel) return kind;
        break;
      case RingMediumKind::kSegmentCalls:
        return kind;
    }
  }
  return RingMediumKind::kSegmentCalls;
}

}  // namespace ravnest::daemon
