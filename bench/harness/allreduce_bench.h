// `ravnest bench allreduce`: our ring all-reduce between local daemons, next to Gloo's
// (c10d::ProcessGroupGloo over loopback) in the same run. Figures, not assertions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::bench {

struct AllReduceFigures {
  std::string name;
  int nodes = 0;
  uint64_t bytes = 0;
  std::vector<double> seconds;  // per repetition (the slowest member)
  double median_seconds() const;
  double algorithm_bandwidth() const;  // bytes / s at the median
  double bus_bandwidth() const;        // algorithm bandwidth * 2(N-1)/N
};

// Starts `nodes` ravnestd processes on free loopback ports and all-reduces `bytes` of float32
// between them `repetitions` times (after one warm-up). `insecure`: the daemons and this process
// talk plain TCP instead of TLS (--insecure), to measure what TLS costs. `shared_memory` false:
// the daemons run with --no-shared-memory, so segments go through their connections as between
// hosts.
AllReduceFigures bench_daemon_allreduce(int nodes, uint64_t bytes, int repetitions,
                                        const std::string& ravnestd, bool insecure = false,
                                        bool shared_memory = true);

// The same with Gloo: `nodes` forked processes, a TCPStore and a ProcessGroupGloo on 127.0.0.1.
// Throws std::runtime_error when the build had no Gloo headers (the PyPI wheel ships none).
AllReduceFigures bench_gloo_allreduce(int nodes, uint64_t bytes, int repetitions);

uint64_t parse_size(const std::string& text);  // "64MiB", "1GiB", "4096", "10MB"

}  // namespace ravnest::bench
