// PeerLinks: connections to daemons (schema::Node) by address, made on first use and kept.
//
// Each connection is bootstrapped once: capnp 0.9 aborts on getMain() over a connection that has
// died, so the capability is kept and its calls fail instead. A connection that failed a call is
// forgotten (watch(), drop()), so that the next node() connects anew: a daemon that died and was
// started again is reached again without restarting anybody else. drop_all() forgets every one
// (a daemon does so when a new job is loaded). The caller's secret rides along for the calls
// that need it.
//
// Not thread-safe: create, use and destroy on the thread whose KJ event loop runs the calls (the
// first EzRpcClient of a thread creates that loop, and the last one destroys it: so a dropped
// connection is only destroyed when the next one is made, never while someone waits on the loop).
// Promises from watch() refer to this object: it must outlive them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <capnp/ez-rpc.h>
#include <kj/async.h>
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

  // `call` is (or waits for) a call made over node(address): when it fails (a time limit joined
  // into it included), the connection it went over is dropped, unless another one replaced it
  // meanwhile; the failure passes on unchanged.
  template <typename T>
  kj::Promise<T> watch(const std::string& address, kj::Promise<T>&& call) {
    const uint64_t generation = generation_of(address);
    return call.catch_([this, address, generation](kj::Exception&& e) -> kj::Promise<T> {
      drop_generation(address, generation);
      return kj::mv(e);
    });
  }

  capnp::Data::Reader secret() const {
    return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(secret_.data()), secret_.size());
  }

 private:
  struct Connection {
    kj::Own<capnp::EzRpcClient> client;
    schema::Node::Client node;
    uint64_t generation = 0;
  };
  std::map<std::string, Connection>::iterator connect(const std::string& address);
  uint64_t generation_of(const std::string& address);  // 0 when not connected
  void drop_generation(const std::string& address, uint64_t generation);

  std::string secret_;
  uint64_t next_generation_ = 1;
  std::map<std::string, Connection> connections_;
  std::vector<Connection> retired_;  // dropped, destroyed at the next connect()
};

}  // namespace ravnest::wire
