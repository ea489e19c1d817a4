// EpochRound: one reduce round of a cross-cluster ring over one membership epoch, as a pair of
// fields (docs/faults.md#providers-that-come-and-go). The epoch is the job's ring membership
// version the requester raises at each drop or join (Node.setRings); the round counts the ring's
// reduces. A reduce run again over a new membership keeps its round and takes the new epoch, so
// that its segments never meet those of the attempt that failed.
//
// Where it crosses the wire it is one 64-bit round tag (RingSink.segment's and sharedSegment's
// `round`, a data channel's header record, ring::MessageTag::round): encode_round_tag and
// decode_round_tag are its one codec, the epoch in the top kEpochBits bits, the round below.
// Plain values and pure functions: any thread.
#pragma once

#include <cstdint>
#include <tuple>

namespace ravnest::membership {

struct EpochRound {
  uint64_t epoch = 0;  // the ring membership's epoch; 0 before any setRings named one
  uint64_t round = 0;  // the ring's reduce round
  friend bool operator==(const EpochRound& a, const EpochRound& b) {
    return a.epoch == b.epoch && a.round == b.round;
  }
  friend bool operator!=(const EpochRound& a, const EpochRound& b) { return !(a == b); }
  friend bool operator<(const EpochRound& a, const EpochRound& b) {
    return std::tie(a.epoch, a.round) < std::tie(b.epoch, b.round);
  }
};

constexpr int kRoundBits = 40;
constexpr int kEpochBits = 64 - kRoundBits;
// The highest epoch a round tag carries: an abort of it ends the reduces of every epoch.
constexpr uint64_t kEveryEpoch = (uint64_t{1} << kEpochBits) - 1;

// The wire's round tag. Throws std::out_of_range naming the value when the round does not fit
// in kRoundBits bits or the epoch in kEpochBits (neither happens in a job: 2^40 reduces, 2^24
// changes of membership).
uint64_t encode_round_tag(const EpochRound& at);
// Any 64-bit tag decodes (epoch 0 and the tag as round for one below 2^40: the benchmark's and
// an uncoordinated job's rounds).
EpochRound decode_round_tag(uint64_t tag);

}  // namespace ravnest::membership
