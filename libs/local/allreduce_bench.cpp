#include "libs/local/allreduce_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

// ProcessGroupGloo.hpp includes Gloo's own headers, which the PyPI torch wheel does not ship
// (Debian's libgloo-dev does): without them the Gloo baseline is not built, and says so.
#if __has_include(<gloo/algorithm.h>)
#define RAVNEST_HARNESS_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define RAVNEST_HARNESS_HAVE_GLOO 0
#endif
#include <kj/async-io.h>

#include "libs/local/local_daemons.h"
#include "libs/local/namespace_hosts.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/transport_security.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::local {

namespace fs = std::filesystem;

double AllReduceFigures::median_seconds() const {
  if (seconds.empty()) return 0;
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

double AllReduceFigures::algorithm_bandwidth() const {
  const double s = median_seconds();
  return s > 0 ? bytes / s : 0;
}

double AllReduceFigures::bus_bandwidth() const {
  return nodes > 1 ? algorithm_bandwidth() * 2.0 * (nodes - 1) / nodes : 0;
}

uint64_t parse_size(const std::string& text) {
  size_t end = 0;
  const double number = std::stod(text, &end);
  std::string unit = text.substr(end);
  const std::pair<const char*, double> units[] = {
      {"", 1},          {"B", 1},         {"KiB", 1024.0},      {"MiB", 1048576.0},
      {"GiB", 1 << 30}, {"KB", 1e3},      {"MB", 1e6},          {"GB", 1e9},
      {"K", 1024.0},    {"M", 1048576.0}, {"G", double(1 << 30)}};
  for (const auto& [name, factor] : units) {
    if (unit == name) return static_cast<uint64_t>(number * factor);
  }
  throw std::invalid_argument("size '" + text + "': unknown unit (use B, KiB, MiB, GiB, KB, MB, GB)");
}

AllReduceFigures bench_daemon_allreduce(int nodes, uint64_t bytes, int repetitions,
                                        const std::string& ravnestd,
                                        const AllReduceSetup& setup) {
  const bool insecure = setup.insecure;
  if (setup.hosts && setup.hosts->size() < static_cast<size_t>(nodes)) {
    throw std::invalid_argument("the benchmark needs a host per node");
  }
  const fs::path dir = fs::temp_directory_path() / ("ravnest-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string secret_file = (dir / "secret").string();
  {
    std::ofstream out(secret_file);
    out << "bench-" << ::getpid() << '\n';
  }
  fs::permissions(secret_file, fs::perms::owner_read | fs::perms::owner_write);
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("bench_" + std::to_string(i));
  AllReduceFigures figures;
  figures.name = "ravnest ring";
  if (!setup.codec.empty() && setup.codec != "none") figures.name += "/" + setup.codec;
  figures.nodes = nodes;
  figures.bytes = bytes;
  {
    LocalDaemons daemons(ravnestd, dir.string(), secret_file, names);
    daemons.set_insecure(insecure);
    if (setup.hosts) {
      std::vector<std::string> namespaces, addresses;
      for (int i = 0; i < nodes; ++i) {
        namespaces.push_back(setup.hosts->namespace_of(i));
        addresses.push_back(setup.hosts->address(i));
      }
      daemons.set_hosts(namespaces, addresses);
    }
    // In the hosts mode the daemons refuse each other's shared memory themselves (a peer in
    // another network namespace stands for another host), as the tests check.
    if (!setup.shared_memory) {
      for (int i = 0; i < nodes; ++i) daemons.set_flags(i, {"--no-shared-memory"});
    }
    daemons.start_all();
    wire::PeerLinks links(
        wire::make_transport_security("bench-" + std::to_string(::getpid()), insecure));
    std::vector<std::string> peers;
    for (int i = 0; i < nodes; ++i) peers.push_back(daemons.address(i));
    auto& wait_scope = links.wait_scope();
    kj::Vector<kj::Promise<capnp::Response<schema::Node::BenchAllReduceResults>>> calls;
    for (int i = 0; i < nodes; ++i) {
      auto request = links.node(peers[i]).benchAllReduceRequest();
      auto list = request.initPeers(nodes);
      for (int p = 0; p < nodes; ++p) list.set(p, peers[p]);
      request.setPosition(i);
      request.setBytes(bytes);
      request.setRepetitions(repetitions);
      request.setCodec(setup.codec);
      calls.add(request.send());
    }
    auto responses = kj::joinPromises(calls.releaseAsArray()).wait(wait_scope);
    figures.seconds.assign(repetitions, 0.0);
    for (auto& response : responses) {
      auto seconds = response.getSeconds();
      for (int r = 0; r < repetitions && r < static_cast<int>(seconds.size()); ++r) {
        figures.seconds[r] = std::max(figures.seconds[r], seconds[r]);
      }
    }
  }
  return figures;
}

#if !RAVNEST_HARNESS_HAVE_GLOO
AllReduceFigures bench_gloo_allreduce(int, uint64_t, int, const NamespaceHosts*) {
  throw std::runtime_error(
      "the Gloo baseline was not built: Gloo's headers (gloo/algorithm.h, Debian's libgloo-dev) "
      "were missing when this LibTorch's build compiled it");
}
#else
AllReduceFigures bench_gloo_allreduce(int nodes, uint64_t bytes, int repetitions,
                                      const NamespaceHosts* hosts) {
  if (hosts && hosts->size() < static_cast<size_t>(nodes)) {
    throw std::invalid_argument("the Gloo baseline needs a host per rank");
  }
  // Each namespace has its ports to itself: rank 0's store takes a fixed one there.
  const uint16_t port = static_cast<uint16_t>(hosts ? 29517 : free_loopback_port());
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int rank = 0; rank < nodes; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      try {
        // The child has one thread: entering the namespace moves all of it, before any socket.
        if (hosts) enter_namespace(hosts->namespace_of(rank));
        const std::string store_host = hosts ? hosts->address(0) : "127.0.0.1";
        const std::string own_host = hosts ? hosts->address(rank) : "127.0.0.1";
        c10d::TCPStoreOptions options;
        options.port = port;
        options.isServer = rank == 0;
        options.numWorkers = nodes;
        options.timeout = std::chrono::seconds(60);
        auto store = c10::make_intrusive<c10d::TCPStore>(store_host, options);
        auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
        gloo_options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(own_host));
        c10d::ProcessGroupGloo group(store, rank, nodes, gloo_options);
        std::vector<at::Tensor> tensors = {
            at::full({static_cast<int64_t>(bytes / 4)}, float(rank + 1))};
        std::vector<double> seconds;
        for (int r = 0; r <= repetitions; ++r) {
          group.barrier()->wait();
          const auto start = std::chrono::steady_clock::now();
          group.allreduce(tensors)->wait();
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (r > 0) seconds.push_back(s);  // the first is a warm-up
        }
        if (::write(fds[1], seconds.data(), seconds.size() * sizeof(double)) < 0) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo rank %d: %s\n", rank, e.what());
        code = 1;
      }
      ::close(fds[1]);
      ::_exit(code);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  AllReduceFigures figures;
  figures.name = "gloo";
  figures.nodes = nodes;
  figures.bytes = bytes;
  figures.seconds.assign(repetitions, 0.0);
  bool failed = false;
  for (size_t rank = 0; rank < children.size(); ++rank) {
    std::vector<double> seconds(repetitions, 0.0);
    size_t got = 0;
    const size_t want = seconds.size() * sizeof(double);
    while (got < want) {
      const ssize_t n = ::read(pipes[rank], reinterpret_cast<char*>(seconds.data()) + got, want - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(pipes[rank]);
    int status = 0;
    ::waitpid(children[rank], &status, 0);
    if (got != want || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = true;
    for (int r = 0; r < repetitions; ++r) {
      figures.seconds[r] = std::max(figures.seconds[r], seconds[r]);
    }
  }
  if (failed) throw std::runtime_error("the Gloo baseline failed (see its messages above)");
  return figures;
}
#endif

}  // namespace ravnest::local
