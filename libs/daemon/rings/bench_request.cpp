#include "libs/daemon/rings/bench_request.h"

#include <stdexcept>
#include <string>

namespace ravnest::daemon {

void check_bench_request(size_t peers, uint32_t position, uint64_t bytes, uint32_t repetitions) {
  if (peers == 0 || peers > kMaxBenchPeers) {
    throw std::invalid_argument("benchAllReduce: " + std::to_string(peers) +
                                " peers, expected 1 to " + std::to_string(kMaxBenchPeers));
  }
  if (position >= peers) {
    throw std::invalid_argument("benchAllReduce: position " + std::to_string(position) +
                                " outside the " + std::to_string(peers) + " peers");
  }
  if (bytes > kMaxBenchBytes) {
    throw std::invalid_argument("benchAllReduce: " + std::to_string(bytes) +
                                " bytes, at most " + std::to_string(kMaxBenchBytes));
  }
  if (repetitions > kMaxBenchRepetitions) {
    throw std::invalid_argument("benchAllReduce: " + std::to_string(repetitions) +
                                " repetitions, at most " + std::to_string(kMaxBenchRepetitions));
  }
}

}  // namespace ravnest::daemon
