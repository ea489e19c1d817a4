// ravnest bench allreduce: the ring all-reduce between local daemons, next to Gloo's measured in
// the same run (bench/harness).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "bench/harness/allreduce_bench.h"
#include "bench/harness/local_daemons.h"

namespace ravnest::cli {
namespace {

void print_figures(const bench::AllReduceFigures& f) {
  std::printf("%-13s N=%d %8.1f MiB  median %8.4f s  algbw %7.3f GB/s  busbw %7.3f GB/s\n",
              f.name.c_str(), f.nodes, f.bytes / 1048576.0, f.median_seconds(),
              f.algorithm_bandwidth() / 1e9, f.bus_bandwidth() / 1e9);
}

struct AllReduceCommand {
  int nodes = 2, repetitions = 5;
  std::string size = "64MiB";
  bool no_gloo = false, insecure = false, no_shared_memory = false;

  int run() const {
    if (nodes < 2) throw std::invalid_argument("--nodes: an all-reduce needs at least 2 nodes");
    const uint64_t bytes = bench::parse_size(size);
    if (insecure) {
      std::cerr << "ravnest: warning: --insecure: the daemons of the benchmark run without TLS\n";
    }
    auto ours = bench::bench_daemon_allreduce(nodes, bytes, repetitions, bench::sibling_ravnestd(),
                                              insecure, !no_shared_memory);
    print_figures(ours);
    if (!no_gloo) {
      auto baseline = bench::bench_gloo_allreduce(nodes, bytes, repetitions);
      print_figures(baseline);
      std::printf("ravnest/gloo bus bandwidth: %.2fx\n",
                  ours.bus_bandwidth() / std::max(baseline.bus_bandwidth(), 1e-12));
    }
    return 0;
  }
};

}  // namespace

Command add_bench(CLI::App& app) {
  auto c = std::make_shared<AllReduceCommand>();
  auto* cmd = app.add_subcommand("bench", "Benchmarks that print figures");
  cmd->require_subcommand(1);
  auto* allreduce = cmd->add_subcommand(
      "allreduce", "Ring all-reduce between local daemons, next to Gloo's in the same run");
  allreduce->add_option("--nodes", c->nodes, "ring members")->capture_default_str();
  allreduce->add_option("--size", c->size, "bytes of float32 per member")->capture_default_str();
  allreduce->add_option("--reps", c->repetitions, "timed repetitions after a warm-up")
      ->capture_default_str();
  allreduce->add_flag("--no-gloo", c->no_gloo, "skip the Gloo baseline");
  allreduce->add_flag("--insecure", c->insecure,
                      "the daemons without TLS (plain TCP), to measure what TLS costs");
  allreduce->add_flag("--no-shared-memory", c->no_shared_memory,
                      "the daemons send every segment through their connections, as "
                      "daemons on different hosts do");
  // `bench` runs its one subcommand.
  return {cmd, [c, allreduce] { return allreduce->parsed() ? c->run() : 0; }};
}

}  // namespace ravnest::cli
