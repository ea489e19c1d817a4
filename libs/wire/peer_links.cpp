#include "libs/wire/peer_links.h"

#include "libs/wire/gate.h"
#include "libs/wire/resolved_client.h"

namespace ravnest::wire {

PeerLinks::~PeerLinks() noexcept(false) {
  // Connections first, while the event loop they run on exists.
  connections_.clear();
  retired_.clear();
}

std::map<std::string, PeerLinks::Connection>::iterator PeerLinks::connect(
    const std::string& address) {
  auto it = connections_.find(address);
  if (it == connections_.end()) {
    io();
    ConnectionOptions options;
    options.security = security_;
    auto client = kj::heap<RpcClient>(address, options);
    auto node = open_gate(client->main<schema::Gate>(), security_->credentials(), client->trust());
    it = connections_.emplace(address, Connection{kj::mv(client), kj::mv(node), next_generation_++})
             .first;
    retired_.clear();
  }
  return it;
}

schema::Node::Client PeerLinks::node(const std::string& address) {
  auto& node = connect(address)->second.node;
  node = resolved_client(kj::mv(node));  // once the gate opened: no queue in front of calls
  return node;
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

}  // namespace ravnest::wire
