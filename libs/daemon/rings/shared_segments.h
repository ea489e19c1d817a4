// SharedSegments: a ring's segments between two daemons on one host, through memory both map
// instead of through the connection. Over loopback TCP every byte of a segment costs the
// kernel two copies and the TCP stack on both sides (docs/performance.md); through shared
// memory it costs the sender one copy into a slot and the receiver reads it where it lies.
//
// The sender (SharedSegmentsWriter) makes an anonymous memory file (memfd) of `slots` slots of
// `slot_bytes` after one page that holds a random nonce, seals it against shrinking and growing,
// and offers (its pid, the file's descriptor number, the nonce, the sizes) when it opens the
// ring. The receiver (SharedSegmentsReader::open) maps the same file read-only through
// /proc/<pid>/fd/<fd>, which only a process of the same user on the same host can open, and
// accepts only a sealed regular file of exactly the announced size that holds the announced
// nonce: on another host the path names nothing or another file, and the nonce does not match.
// The seals make the mapping safe to read for as long as it exists (nobody can truncate the
// file under it), whatever the sender does later. A refused offer costs nothing: the segments
// travel over the connection as before.
//
// Which slot a segment uses and when it may be reused is the ring link's business (its
// in-flight window: a slot is written again only after the call that announced it was answered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ravnest::daemon {

struct SharedSegmentsOffer {
  uint32_t pid = 0;
  uint32_t fd = 0;
  std::string nonce;  // 32 random bytes
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
};

// What a receiver maps at most, per ring: 2 slots of the daemons' 4 MiB segments need 8 MiB.
constexpr uint32_t kMaxSharedSlots = 64;
constexpr uint64_t kMaxSharedBytes = uint64_t{256} << 20;

class SharedSegmentsWriter {
 public:
  // Throws std::runtime_error (with the system's reason) when the memory cannot be made.
  SharedSegmentsWriter(uint32_t slots, uint64_t slot_bytes);
  ~SharedSegmentsWriter();
  SharedSegmentsWriter(const SharedSegmentsWriter&) = delete;
  SharedSegmentsWriter& operator=(const SharedSegmentsWriter&) = delete;

  const SharedSegmentsOffer& offer() const { return offer_; }
  uint8_t* slot(uint32_t index) const;  // index < slots

 private:
  SharedSegmentsOffer offer_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t mapped_ = 0;
};

class SharedSegmentsReader {
 public:
  // Maps the offered memory, or returns nullptr and says why in `refusal` (an offer from another
  // host, another user, or one that breaks the limits above).
  static std::shared_ptr<const SharedSegmentsReader> open(const SharedSegmentsOffer& offer,
                                                          std::string& refusal);
  ~SharedSegmentsReader();
  SharedSegmentsReader(const SharedSegmentsReader&) = delete;
  SharedSegmentsReader& operator=(const SharedSegmentsReader&) = delete;

  uint32_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  const uint8_t* slot(uint32_t index) const;  // index < slots

 private:
  SharedSegmentsReader(const uint8_t* base, size_t mapped, uint32_t slots, uint64_t slot_bytes)
      : base_(base), mapped_(mapped), slots_(slots), slot_bytes_(slot_bytes) {}

  const uint8_t* base_;
  size_t mapped_;
  uint32_t slots_;
  uint64_t slot_bytes_;
};

}  // namespace ravnest::daemon
