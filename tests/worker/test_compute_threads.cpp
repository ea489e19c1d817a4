// compute_threads.h: how many intra-op threads a daemon gives LibTorch, from its config and the
// daemons of the plan that share its host.
#include <catch2/catch.hpp>

#include "libs/worker/compute_threads.h"

using namespace ravnest;
using worker::compute_threads;
using worker::daemons_sharing_host;

namespace {

config::NodeMetadata node(int id, const std::string& address) {
  config::NodeMetadata m;
  m.node_id = id;
  m.address = address;
  m.addresses[id] = address;
  return m;
}

}  // namespace

TEST_CASE("compute threads: configured, or the cores divided", "[daemon][threads]") {
  CHECK(compute_threads(3, 8, 4) == 3);   // configured wins, even above cores / sharing
  CHECK(compute_threads(0, 8, 1) == 8);
  CHECK(compute_threads(0, 8, 3) == 2);   // 3 daemons on 8 cores: 2 each (floor)
  CHECK(compute_threads(0, 2, 3) == 1);   // never 0
  CHECK(compute_threads(0, 0, 0) == 1);   // hardware_concurrency() may say 0
}

TEST_CASE("compute threads: the plan's daemons on this host", "[daemon][threads]") {
  auto m = node(1, "10.0.0.2:8081");
  CHECK(daemons_sharing_host(m) == 1);
  m.addresses[0] = "10.0.0.2:8080";   // same host, another port
  m.addresses[2] = "10.0.0.3:8080";   // another host
  m.addresses[3] = "10.0.0.22:8080";  // a host whose name starts the same
  CHECK(daemons_sharing_host(m) == 2);
  // Ring neighbours in other clusters and parameter servers count too, each node once.
  config::RingMembership ring;
  ring.size = 3;
  ring.next = {5, 1, "10.0.0.2:8085"};
  ring.prev = {6, 2, "10.0.0.4:8086"};
  m.rings.push_back(ring);
  m.rings.push_back(ring);
  config::PsServer server;
  server.node = 7;
  server.address = "10.0.0.2:8087";
  m.parameter_server.servers.push_back(server);
  CHECK(daemons_sharing_host(m) == 4);  // nodes 0, 1, 5, 7

  // Every ring neighbour on this host: the plan's other clusters are here too (a local plan).
  auto local = node(1, "127.0.0.1:8081");
  local.addresses[0] = "127.0.0.1:8080";
  local.cluster_count = 3;
  config::RingMembership here;
  here.size = 3;
  here.next = {3, 1, "127.0.0.1:8083"};
  here.prev = {5, 2, "127.0.0.1:8085"};
  local.rings.push_back(here);
  CHECK(daemons_sharing_host(local) == 6);  // 2 nodes a cluster, 3 clusters

  auto v6 = node(0, "[::1]:9000");
  v6.addresses[1] = "[::1]:9001";
  v6.addresses[2] = "[::2]:9001";
  CHECK(daemons_sharing_host(v6) == 2);
  // A wildcard listen address says nothing about the host.
  auto any = node(0, "0.0.0.0:9000");
  any.addresses[1] = "0.0.0.0:9001";
  CHECK(daemons_sharing_host(any) == 1);
}
