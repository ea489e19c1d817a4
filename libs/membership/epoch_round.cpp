#include "libs/membership/epoch_round.h"

#include <stdexcept>
#include <string>

namespace ravnest::membership {

uint64_t encode_round_tag(const EpochRound& at) {
  if (at.round >> kRoundBits != 0) {
    throw std::out_of_range("ring round " + std::to_string(at.round) + " does not fit in " +
                            std::to_string(kRoundBits) + " bits of a round tag");
  }
  if (at.epoch > kEveryEpoch) {
    throw std::out_of_range("ring membership epoch " + std::to_string(at.epoch) +
                            " does not fit in " + std::to_string(kEpochBits) +
                            " bits of a round tag");
  }
  return at.round | (at.epoch << kRoundBits);
}

EpochRound decode_round_tag(uint64_t tag) {
  return {tag >> kRoundBits, tag & ((uint64_t{1} << kRoundBits) - 1)};
}

}  // namespace ravnest::membership
