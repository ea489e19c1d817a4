// ravnest bench allreduce: the ring all-reduce between local daemons, next to Gloo's measured in
// the same run (libs/local); with --hosts each daemon (and Gloo rank) in a network namespace of
// its own over veth links, with --rate those links shaped and their bound measured in the run.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "libs/local/allreduce_bench.h"
#include "libs/local/local_daemons.h"
#include "libs/local/namespace_hosts.h"
#include "libs/config/job/compression_spec.h"

namespace ravnest::cli {
namespace {

void print_figures(const local::AllReduceFigures& f) {
  std::printf("%-13s N=%d %8.1f MiB  median %8.4f s  algbw %8.4f GB/s  busbw %8.4f GB/s\n",
              f.name.c_str(), f.nodes, f.bytes / 1048576.0, f.median_seconds(),
              f.algorithm_bandwidth() / 1e9, f.bus_bandwidth() / 1e9);
}

void print_ratio(const char* what, double ours, double theirs) {
  std::printf("%s bus bandwidth: %.2fx\n", what, ours / std::max(theirs, 1e-12));
}

struct AllReduceCommand {
  int nodes = 2, repetitions = 5;
  std::string size = "64MiB";
  bool no_gloo = false, insecure = false, no_shared_memory = false, hosts = false;
  std::string rate, codec, name = "rnb";

  int run() const {
    if (nodes < 2) throw std::invalid_argument("--nodes: an all-reduce needs at least 2 nodes");
    const uint64_t bytes = local::parse_size(size);
    config::WireCodec parsed_codec;
    if (!codec.empty() && !config::parse_wire_codec(codec, parsed_codec)) {
      throw std::invalid_argument("--codec '" + codec + "': use none, fp16, bf16 or int8");
    }
    if (insecure) {
      std::cerr << "ravnest: warning: --insecure: the daemons of the benchmark run without TLS\n";
    }
    const bool in_namespaces = hosts || !rate.empty();
    std::optional<local::NamespaceHosts> namespaces;
    double link_bound = 0;
    if (in_namespaces) {
      if (const std::string why = local::hosts_unavailable(); !why.empty()) {
        throw std::runtime_error("--hosts: " + why);
      }
      namespaces.emplace(local::unique_hosts_name(name), nodes, rate);
      std::printf("hosts: %d network namespaces (%s*) on one bridge, links %s\n", nodes,
                  namespaces->name().c_str(), rate.empty() ? "unshaped" : rate.c_str());
      if (!rate.empty()) {
        // Host 1 to host 0: two shaped link ends and the bridge, as every ring hop crosses.
        link_bound = local::measure_link_bandwidth(*namespaces, 1, 0);
        std::printf("link bound   one TCP stream host 1 -> 0 for 2 s: %.1f Mbit/s = %.4f GB/s "
                    "(nominal %s)\n",
                    link_bound * 8 / 1e6, link_bound / 1e9, rate.c_str());
      }
    }
    local::AllReduceSetup setup;
    setup.insecure = insecure;
    setup.shared_memory = !no_shared_memory;
    setup.hosts = namespaces ? &*namespaces : nullptr;
    setup.codec = codec;
    auto ours =
        local::bench_daemon_allreduce(nodes, bytes, repetitions, local::sibling_ravnestd(), setup);
    print_figures(ours);
    if (!no_gloo) {
      auto baseline = local::bench_gloo_allreduce(nodes, bytes, repetitions, setup.hosts);
      print_figures(baseline);
      print_ratio("ravnest/gloo", ours.bus_bandwidth(), baseline.bus_bandwidth());
      if (link_bound > 0) {
        print_ratio("gloo/link bound", baseline.bus_bandwidth(), link_bound);
      }
    }
    if (link_bound > 0) print_ratio("ravnest/link bound", ours.bus_bandwidth(), link_bound);
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
  allreduce->add_flag("--hosts", c->hosts,
                      "each daemon (and Gloo rank) in a network namespace of its own, over veth "
                      "links on one bridge (scripts/wan; needs root)");
  allreduce->add_option("--rate", c->rate,
                        "shape each host's link with tc's tbf to this rate (1gbit, 100mbit; "
                        "implies --hosts) and measure the link's bound in the same run");
  allreduce->add_option("--codec", c->codec,
                        "the ring's segments under this [compression] rings codec (fp16, bf16, "
                        "int8); bandwidth still counted in float32 bytes");
  allreduce->add_option("--hosts-name", c->name,
                        "prefix of the namespaces' names (a pid and a letter follow)")
      ->capture_default_str();
  // `bench` runs its one subcommand.
  return {cmd, [c, allreduce] { return allreduce->parsed() ? c->run() : 0; }};
}

}  // namespace ravnest::cli
