// `ravnest bench allreduce`: our ring all-reduce between local daemons, next to Gloo's
// (c10d::ProcessGroupGloo over loopback) in the same run. Figures, not assertions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::local {

struct AllReduceFigures {
  std::string name;
  int nodes = 0;
  uint64_t bytes = 0;
  std::vector<double> seconds;  // per repetition (the slowest member)
  double median_seconds() const;
  double algorithm_bandwidth() const;  // bytes / s at the median
  double bus_bandwidth() const;        // algorithm bandwidth * 2(N-1)/N
};

class NamespaceHosts;

struct AllReduceSetup {
  // The daemons and this process talk plain TCP instead of TLS (--insecure), to measure what
  // TLS costs.
  bool insecure = false;
  // false: the daemons run with --no-shared-memory, so segments go through their connections as
  // between hosts.
  bool shared_memory = true;
  // Not null: daemon (or Gloo rank) i runs in host i's network namespace, reached over its veth
  // link (at least `nodes` hosts), instead of on 127.0.0.1.
  const NamespaceHosts* hosts = nullptr;
  // "" / "none": float32 as is; "fp16", "bf16", "int8": the ring's segments travel under that
  // [compression] rings codec. The figures still count float32 bytes (effective bandwidth).
  std::string codec;
};

// Starts `nodes` ravnestd processes (on free loopback ports, or in `setup.hosts`) and all-reduces
// `bytes` of float32 between them `repetitions` times (after one warm-up).
AllReduceFigures bench_daemon_allreduce(int nodes, uint64_t bytes, int repetitions,
                                        const std::string& ravnestd,
                                        const AllReduceSetup& setup = {});

// The same with Gloo: `nodes` forked processes, a TCPStore and a ProcessGroupGloo on 127.0.0.1,
// or with `hosts`, rank i in host i's namespace at its address.
// Throws std::runtime_error when the build had no Gloo headers (the PyPI wheel ships none).
AllReduceFigures bench_gloo_allreduce(int nodes, uint64_t bytes, int repetitions,
                                      const NamespaceHosts* hosts = nullptr);

uint64_t parse_size(const std::string& text);  // "64MiB", "1GiB", "4096", "10MB"

}  // namespace ravnest::local
