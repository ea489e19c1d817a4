#include "libs/wire/peer_links.h"

#include "libs/wire/rpc_connection.h"

namespace ravnest::wire {

std::map<std::string, PeerLinks::Connection>::iterator PeerLinks::connect(
    const std::string& address) {
  auto it = connections_.find(address);
  if (it == connections_.end()) {
    auto client = kj::heap<capnp::EzRpcClient>(address, 0, rpc_reader_options());
    auto main = client->getMain<schema::Node>();
    it = connections_.emplace(address, Connection{kj::mv(client), kj::mv(main)}).first;
  }
  return it;
}

schema::Node::Client PeerLinks::node(const std::string& address) {
  return connect(address)->second.node;
}

void PeerLinks::drop(const std::string& address) { connections_.erase(address); }

void PeerLinks::drop_all() { connections_.clear(); }

capnp::EzRpcClient& PeerLinks::any_client(const std::string& address) {
  if (connections_.empty()) connect(address);
  return *connections_.begin()->second.client;
}

}  // namespace ravnest::wire
