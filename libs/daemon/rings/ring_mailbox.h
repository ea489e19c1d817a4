// RingMailbox: where a daemon's RPC thread leaves the ring segments that peers send it, and where
// the threads running all-reduces wait for them: the receiving side of every medium
// (media/ring_medium.h). Segments of segment calls and of shared memory come from the ring's
// RingSinkServer, keyed by (ring, round, step, segment); a ring's data channel, when the previous
// member's medium is one, from RingMember::accept_channel. A waiter takes whichever comes, since
// a member that offered a channel and could not connect it sends segment calls instead.
// abort() wakes every waiter with a reason (a member failed, or the requester stopped the job).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "libs/membership/epoch_round.h"
#include "libs/wire/data_channel.h"

namespace ravnest::daemon {

class RingMailbox {
 public:
  struct Key {
    uint32_t ring;
    uint64_t round;  // a round tag: its epoch and round (membership::decode_round_tag)
    uint32_t step;
    uint32_t segment;
    bool operator<(const Key& o) const {
      return std::tie(ring, round, step, segment) < std::tie(o.ring, o.round, o.step, o.segment);
    }
  };

  // The bytes stay where they are (in the RPC message) until taken; `release` runs once they
  // were copied out, or when the mailbox is aborted or reset, and lets the message go.
  void deposit_borrowed(const Key& key, const void* data, size_t size,
                        std::function<void()> release);
  // Waits for `key`, copying exactly `bytes` into `out`. Every `liveness_period_ms` without the
  // message it calls `check_alive`, which throws (naming the peer) when the sender is gone.
  // Throws std::runtime_error on abort or a size mismatch.
  void take(const Key& key, void* out, size_t bytes, const std::function<void()>& check_alive,
            int liveness_period_ms = 1000);
  // The same, but calls `use` with the bytes where they lie in the message (exactly `bytes` of
  // them, valid until `use` returns), then lets the message go.
  void take_in_place(const Key& key, size_t bytes, const std::function<void(const void*)>& use,
                     const std::function<void()>& check_alive, int liveness_period_ms = 1000);
  // A ring's data channel (wire/data_channel.h), one per ring at most: the RPC thread drops it
  // when the ring is opened again (openRing) and leaves the new one once its connection came.
  // Dropping shuts the channel down, so a reader blocked on it fails at once.
  // `only`: drop it only if it is still that channel (a reader that saw it fail).
  void drop_channel(uint32_t ring, const wire::DataChannel* only = nullptr);
  void deposit_channel(uint32_t ring, std::shared_ptr<wire::DataChannel> channel);
  // Waits for `key` (then as take_in_place, and returns null) or for a data channel of
  // `key.ring` (returned, nothing taken), whichever is first; throws as take_in_place does.
  std::shared_ptr<wire::DataChannel> take_in_place_or_channel(
      const Key& key, size_t bytes, const std::function<void(const void*)>& use,
      const std::function<void()>& check_alive, int liveness_period_ms = 1000);
  // Throws std::runtime_error with the reason when `ring`'s reduce `round` (or every ring) was
  // aborted.
  void check_aborted(uint32_t ring, uint64_t round);
  // The same, but waits up to `timeout_ms` for such an abort (on the condition variable that
  // abort() notifies, as take_in_place waits for segments); returns when none came in time.
  void wait_aborted(uint32_t ring, uint64_t round, int timeout_ms);
  // This ring's reduces of membership `epoch` or an older one (a key's round is a round tag:
  // libs/membership/epoch_round.h); of every epoch by default, which also shuts its data channel
  // down.
  void abort(uint32_t ring, const std::string& reason,
             uint64_t epoch = membership::kEveryEpoch);
  void abort_all(const std::string& reason);
  void reset();  // a new job: forget aborts and stale segments

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  struct Segment {
    const void* data = nullptr;  // in the RPC message that brought them
    size_t size = 0;
    std::function<void()> release;
  };
  void release_all(std::unique_lock<std::mutex>& lock);  // and shuts every channel down
  std::shared_ptr<wire::DataChannel> wait(const Key& key, size_t bytes,
                                          const std::function<void(const void*)>& use,
                                          const std::function<void()>& check_alive,
                                          int liveness_period_ms, bool or_channel);
  std::map<Key, Segment> segments_;
  struct Aborted {
    std::string reason;
    uint64_t epoch = 0;  // reduces of this membership epoch and older ones
  };
  const std::string* ring_aborted(const Key& key) const;  // under mutex_
  std::map<uint32_t, Aborted> aborted_;
  std::map<uint32_t, std::shared_ptr<wire::DataChannel>> channels_;
  std::string all_aborted_;
};

}  // namespace ravnest::daemon
