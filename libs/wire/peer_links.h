// PeerLinks: connections to daemons (schema::Node) by address, made on first use and kept.
//
// Each connection is bootstrapped once: capnp 0.9 aborts on getMain() over a connection that has
// died, so the capability is kept and its calls fail instead; drop() forgets one, and the next
// node() connects anew. The caller's secret rides along for the calls that need it.
//
// Not thread-safe: create, use and destroy on the thread whose KJ event loop runs the calls (the
// first EzRpcClient of a thread creates that loop).
#pragma once

#include <map>
#include <string>

#include <capnp/ez-rpc.h>
#include <kj/memory.h>

#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

class PeerLinks {
 public:
  explicit PeerLinks(std::string secret) : secret_(std::move(secret)) {}
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // Connects (host:port, see capnp::EzRpcClient) unless connected.
  schema::Node::Client node(const std::string& address);
  void drop(const std::string& address);  // the next node() call connects anew
  void drop_all();
  // One of the connections (to `address` when there is none yet), for the thread's event loop:
  // its wait scope and timer.
  capnp::EzRpcClient& any_client(const std::string& address);

  capnp::Data::Reader secret() const {
    return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(secret_.data()), secret_.size());
  }

 private:
  struct Connection {
    kj::Own<capnp::EzRpcClient> client;
    schema::Node::Client node;
  };
  std::map<std::string, Connection>::iterator connect(const std::string& address);

  std::string secret_;
  std::map<std::string, Connection> connections_;
};

}  // namespace ravnest::wire
