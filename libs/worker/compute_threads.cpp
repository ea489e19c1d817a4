#include "libs/worker/compute_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <set>
#include <thread>

#include "libs/base/address.h"

namespace ravnest::worker {
namespace {

// The host of a node's "host:port" (IPv6 without brackets); the text itself if it is not one.
std::string host_of(const std::string& address) {
  const auto parsed = base::Address::try_parse(address, base::Address::PortRule::kZeroAllowed);
  return parsed ? parsed->host() : address;
}

}  // namespace

int daemons_sharing_host(const config::NodeMetadata& metadata) {
  const std::string own = host_of(metadata.address);
  if (own.empty() || own == "0.0.0.0" || own == "::") return 1;
  std::set<int> nodes{metadata.node_id};
  auto count = [&](int node, const std::string& address) {
    if (host_of(address) == own) nodes.insert(node);
  };
  for (const auto& [node, address] : config::peer_addresses(metadata)) count(node, address);
  const int in_cluster = static_cast<int>(nodes.size());
  // A node knows only its rings' neighbours (docs/node-metadata.md#rings). When every one of
  // them shares this host, the other clusters are taken to run here too, as this one does (a
  // plan of one machine: `ravnest local`, the tests).
  bool rings_here = false, rings_elsewhere = false;
  for (const auto& ring : metadata.rings) {
    for (const config::RingPeer* peer : {&ring.next, &ring.prev}) {
      if (peer->node == metadata.node_id) continue;
      count(peer->node, peer->address);
      (host_of(peer->address) == own ? rings_here : rings_elsewhere) = true;
    }
  }
  int sharing = static_cast<int>(nodes.size());
  if (rings_here && !rings_elsewhere) {
    sharing = std::max(sharing, in_cluster * std::max(1, metadata.cluster_count));
  }
  return sharing;
}

int compute_threads(int configured, int cores, int sharing) {
  if (configured > 0) return configured;
  return std::max(1, std::max(1, cores) / std::max(1, sharing));
}

int apply_compute_threads(int configured, const config::NodeMetadata* metadata) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads =
      compute_threads(configured, cores, metadata ? daemons_sharing_host(*metadata) : 1);
  at::set_num_threads(threads);
  return threads;
}

}  // namespace ravnest::worker
