// RelayStore: the sealed all-gather segments a ring link received to pass on unchanged, from the
// ring thread that received them (RingLink::recv_to_relay) to the sender thread that relays them
// (RingLink::relay): wire/data_channel.h's SealedFrame, keyed by the tag they came under.
//
// Bounded, because every buffer is a segment's sealed bytes (4 MiB at the daemons' segments): at
// most `capacity` buffers exist at once, lent to a receiver, kept, taken by the relaying sender,
// or spare for the next segment (reused: fresh pages cost more than the sealing saves). When all
// are in use, lend() says no and the segment is sealed again when it goes on. Every buffer lent or
// taken must come back through give_back(), on errors too (the count would leak otherwise).
//
// Thread-safe; nothing blocks but the internal mutex.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "libs/ring/ring_transport.h"
#include "libs/wire/data_channel.h"

namespace ravnest::daemon {

class RelayStore {
 public:
  explicit RelayStore(size_t capacity) : capacity_(capacity) {}

  // A buffer to receive a segment into (a spare, or a new one while fewer than `capacity`
  // exist), or nothing when all are in use.
  std::optional<wire::SealedFrame> lend();
  // `frame`, lent and now holding a relayable segment, kept under `tag` until take(tag).
  void keep(const ring::RingTag& tag, wire::SealedFrame frame);
  // The segment kept under `tag`, or nothing (it came another way, or was not kept).
  std::optional<wire::SealedFrame> take(const ring::RingTag& tag);
  // A buffer lent or taken comes back: its key wiped, its memory kept for the next segment.
  void give_back(wire::SealedFrame frame);
  // Whatever is kept and not taken goes back (a run ended; its segments will not be relayed).
  void clear();

  size_t capacity() const { return capacity_; }

 private:
  static void wipe(wire::SealedFrame& frame);

  const size_t capacity_;
  std::mutex mutex_;
  size_t in_use_ = 0;  // lent, kept or taken: not in spare_
  std::deque<std::pair<ring::RingTag, wire::SealedFrame>> kept_;
  std::vector<wire::SealedFrame> spare_;
};

}  // namespace ravnest::daemon
