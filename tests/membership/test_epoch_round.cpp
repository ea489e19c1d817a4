// A ring round of one membership epoch and its round tag (libs/membership/epoch_round.h).
#include <catch2/catch.hpp>

#include <stdexcept>

#include "libs/membership/epoch_round.h"

using namespace ravnest;
using membership::EpochRound;

TEST_CASE("epoch round: the tag carries epoch and round apart and decodes back", "[membership]") {
  for (const EpochRound at : {EpochRound{0, 0}, EpochRound{0, 7}, EpochRound{1, 7},
                              EpochRound{3, (uint64_t{1} << 40) - 1},
                              EpochRound{membership::kEveryEpoch, 12}}) {
    CHECK(membership::decode_round_tag(membership::encode_round_tag(at)) == at);
  }
  // Epoch 0's tag is the round itself (the benchmark's and an uncoordinated job's rounds).
  CHECK(membership::encode_round_tag({0, 7}) == 7);
  // The same round over two epochs: two tags, never one segment for the other.
  CHECK(membership::encode_round_tag({0, 7}) != membership::encode_round_tag({1, 7}));
  CHECK(EpochRound{0, 9} < EpochRound{1, 7});
}

TEST_CASE("epoch round: a round or an epoch too wide for the tag is refused", "[membership]") {
  CHECK_THROWS_AS(membership::encode_round_tag({0, uint64_t{1} << 40}), std::out_of_range);
  CHECK_THROWS_WITH(membership::encode_round_tag({membership::kEveryEpoch + 1, 0}),
                    Catch::Contains("epoch 16777216 does not fit in 24 bits"));
}
