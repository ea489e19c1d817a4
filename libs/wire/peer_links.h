// PeerLinks: connections to daemons (schema::Node) by address, made on first use and kept.
//
// Each connection runs under the transport security given (TLS with the secret's certificates,
// or plain TCP with --insecure: transport_security.h) and is opened once at the daemon's gate
// (gate.h); the Node it yields is the permission for every call, so no call carries the secret.
// node() returns at once: calls wait for the connection and the gate, and fail with a one-line
// "refused: ..." reason when the daemon does not accept our secret.
//
// Each connection is bootstrapped once: capnp 0.9 aborts on a bootstrap over a connection that
// has died, so the Node is kept and its calls fail instead. A connection that failed a call is
// forgotten (watch(), drop()), so that the next node() connects anew: a daemon that died and was
// started again is reached again without restarting anybody else. drop_all() forgets every one
// (a daemon does so when a new job is loaded).
//
// Not thread-safe: create, use and destroy on the thread whose KJ event loop runs the calls
// (thread_io.h: the loop is made by the first user on the thread and kept while this object
// lives). A dropped connection is destroyed when the next one is made, never inside the
// callback that dropped it. Promises from watch() refer to this object: it must outlive them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/memory.h>
#include <kj/timer.h>

#include "libs/wire/rpc_connection.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/transport_security.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

class PeerLinks {
 public:
  explicit PeerLinks(std::shared_ptr<TransportSecurity> security)
      : security_(std::move(security)) {}
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;
  ~PeerLinks() noexcept(false);

  // The daemon at `address` ("host:port"), connected and opened at its gate unless it is.
  schema::Node::Client node(const std::string& address);
  void drop(const std::string& address);  // the next node() call connects anew
  void drop_all();

  // This thread's event loop (made on first use): its wait scope and timer.
  kj::WaitScope& wait_scope() { return io().wait_scope(); }
  kj::Timer& timer() { return io().timer(); }

  const std::shared_ptr<TransportSecurity>& security() const { return security_; }

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

 private:
  struct Connection {
    kj::Own<RpcClient> client;
    schema::Node::Client node;
    uint64_t generation = 0;
  };
  ThreadIo& io() {
    if (!io_) io_ = ThreadIo::get();
    return *io_;
  }
  std::map<std::string, Connection>::iterator connect(const std::string& address);
  uint64_t generation_of(const std::string& address);  // 0 when not connected
  void drop_generation(const std::string& address, uint64_t generation);

  kj::Own<ThreadIo> io_;  // first: destroyed after every connection
  std::shared_ptr<TransportSecurity> security_;
  uint64_t next_generation_ = 1;
  std::map<std::string, Connection> connections_;
  std::vector<Connection> retired_;  // dropped, destroyed at the next connect()
};

}  // namespace ravnest::wire
