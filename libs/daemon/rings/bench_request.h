// What a Node.benchAllReduce call (`ravnest bench allreduce`) may ask of a daemon, checked before
// anything is allocated or connected: a peer decides the size of the tensor the daemon fills and
// how often it reduces it, so both are bounded.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ravnest::daemon {

constexpr uint64_t kMaxBenchBytes = uint64_t{1} << 30;  // 1 GiB of float32
constexpr uint32_t kMaxBenchRepetitions = 1000;
constexpr size_t kMaxBenchPeers = 256;

// Throws std::invalid_argument, one line saying which value is out of bounds: no peers or more
// than kMaxBenchPeers, `position` outside them, `bytes` above kMaxBenchBytes, more than
// kMaxBenchRepetitions repetitions.
void check_bench_request(size_t peers, uint32_t position, uint64_t bytes, uint32_t repetitions);

}  // namespace ravnest::daemon
