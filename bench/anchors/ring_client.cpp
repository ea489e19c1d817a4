// bench/anchors/hivemind.sh's "ours" (`ravnest bench allreduce --hosts` makes namespaces of its
// own; these daemons run in the ones Hivemind's peers use): asks running
// daemons (each started by the script inside its own network namespace) for one benchAllReduce,
// the same RPC `ravnest bench allreduce` sends to its local daemons, and prints one JSON line
// {"nodes":N,"bytes":B,"seconds":[...]} (per repetition, the slowest member). Figures only.
//   bench_anchor_ring --peers A:P,B:P[,...] --bytes B --reps R --secret-file F [--insecure]
// `peers` are the addresses the daemons are reached at, in ring order; each daemon gets the list
// and its position, and dials the others itself (through the shaped links).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <kj/async-io.h>

#include "libs/local/allreduce_bench.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/transport_security.h"
#include "schemas/ravnest.capnp.h"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string read_secret(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--secret-file " + path + ": cannot read");
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

int run(int argc, char** argv) {
  std::vector<std::string> peers;
  uint64_t bytes = 0;
  int repetitions = 3;
  std::string secret_file;
  bool insecure = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + ": needs a value");
      return argv[++i];
    };
    if (flag == "--peers") peers = split(value());
    else if (flag == "--bytes") bytes = ravnest::local::parse_size(value());
    else if (flag == "--reps") repetitions = std::stoi(value());
    else if (flag == "--secret-file") secret_file = value();
    else if (flag == "--insecure") insecure = true;
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (peers.size() < 2) throw std::invalid_argument("--peers: at least two addresses");
  if (bytes == 0) throw std::invalid_argument("--bytes: give a size, e.g. 4MiB");
  if (repetitions < 1) throw std::invalid_argument("--reps: at least 1");
  // The daemons' gate checks the secret with or without TLS.
  if (secret_file.empty()) throw std::invalid_argument("--secret-file: required");
  ravnest::wire::PeerLinks links(
      ravnest::wire::make_transport_security(read_secret(secret_file), insecure));
  auto& wait_scope = links.wait_scope();
  const auto nodes = static_cast<uint32_t>(peers.size());
  kj::Vector<kj::Promise<capnp::Response<ravnest::schema::Node::BenchAllReduceResults>>> calls;
  for (uint32_t i = 0; i < nodes; ++i) {
    auto request = links.node(peers[i]).benchAllReduceRequest();
    auto list = request.initPeers(nodes);
    for (uint32_t p = 0; p < nodes; ++p) list.set(p, peers[p]);
    request.setPosition(i);
    request.setBytes(bytes);
    request.setRepetitions(static_cast<uint32_t>(repetitions));
    calls.add(request.send());
  }
  auto responses = kj::joinPromises(calls.releaseAsArray()).wait(wait_scope);
  std::vector<double> seconds(repetitions, 0.0);
  for (auto& response : responses) {
    auto got = response.getSeconds();
    for (int r = 0; r < repetitions && r < static_cast<int>(got.size()); ++r) {
      seconds[r] = std::max(seconds[r], got[r]);
    }
  }
  std::printf("{\"nodes\": %u, \"bytes\": %llu, \"seconds\": [", nodes,
              static_cast<unsigned long long>(bytes));
  for (int r = 0; r < repetitions; ++r) std::printf("%s%.6f", r ? ", " : "", seconds[r]);
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kj::Exception& e) {
    std::cerr << "bench_anchor_ring: " << e.getDescription().cStr() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench_anchor_ring: " << e.what() << "\n";
  }
  return 1;
}
