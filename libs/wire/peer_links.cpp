#include "libs/wire/peer_links.h"

#include "libs/wire/rpc_connection.h"

namespace ravnest::wire {

std::map<std::string, PeerLinks::Connection>::iterator PeerLinks::connect(
    const std::string& address) {
  auto it = connections_.find(address);
  if (it == connections_.end()) {
    auto client = kj::heap<capnp::EzRpcClient>(address, 0, rpc_reader_options());
    auto main = client->getMain<schema::Node>();
    it = connections_.emplace(address, Connection{kj::mv(client), kj::mv(main), next_generation_++})
             .first;
    retired_.clear();  // the new client keeps the thread's event loop alive
  }
  return it;
}

schema::Node::Client PeerLinks::node(const std::string& address) {
  return connect(address)->second.node;
}

void PeerLinks::drop(const std::string& address) {
  auto it = connections_.find(address);
  if (it == connections_.end()) return;
  retired_.push_back(kj::mv(it->second));
  connections_.erase(it);
}

void PeerLinks::drop_all() {
  for (auto& [address, connection] : connections_) retired_.push_back(kj::mv(connection));
  connections_.clear();
}

uint64_t PeerLinks::generation_of(const std::string& address) {
  auto it = connections_.find(address);
  return it == connections_.end() ? 0 : it->second.generation;
}

void PeerLinks::drop_generation(const std::string& address, uint64_t generation) {
  auto it = connections_.find(address);
  if (it != connections_.end() && generation != 0 && it->second.generation == generation) {
    drop(address);
  }
}

capnp::EzRpcClient& PeerLinks::any_client(const std::string& address) {
  if (connections_.empty()) {
    if (!retired_.empty()) return *retired_.back().client;
    connect(address);
  }
  return *connections_.begin()->second.client;
}

}  // namespace ravnest::wire
