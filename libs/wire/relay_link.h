// RelayLink: a daemon behind NAT reached through a relay (relay.h, docs/relay.md). It keeps one
// control connection to the relay, asking it to hold `port` for this node; for each "open
// SESSION" the relay sends, it opens a fresh connection to the relay, joins the session, and
// hands the stream to `adopt` (the daemon's RpcServer::adopt): from there the connection is
// served as one the node accepted itself, its TLS and gate included. A lost or refused control
// connection is made again every 2 s, forever. The relay's challenge is answered with a proof of
// the secret (relay.h): a relay that refuses it says `refused: wrong secret` in one line.
//
// Runs on the calling thread's KJ event loop (thread_io.h): create, use and destroy it there;
// run() never blocks the loop.
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "libs/wire/node_credentials.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/relay_table.h"

namespace ravnest::wire {

class RelayLink : private kj::TaskSet::ErrorHandler {
 public:
  // (the joined stream, the peer's host:port as the relay saw it)
  using Adopt = std::function<void(kj::Own<kj::AsyncIoStream>, const std::string&)>;
  // `relay` is the relay's "host:port"; `port` the port asked of it (0: any). `credentials`
  // answer the relay's challenge (relay_table.h), proving this node knows the secret; null: a
  // relay that challenges is refused by this side ("this node has no secret to prove").
  RelayLink(std::string relay, uint16_t port, Adopt adopt,
            std::function<void(const std::string&)> on_event,
            std::shared_ptr<const NodeCredentials> credentials = nullptr);
  ~RelayLink() noexcept(false);

  // Keeps the control connection until the link is destroyed; never resolves.
  kj::Promise<void> run();
  // The port the relay holds for this node: 0 until it answered.
  uint16_t port() const { return held_port_; }
  // "relayhost:PORT", where peers dial this node; "" until the relay answered.
  std::string relayed_address() const;

 private:
  kj::Promise<void> control_once();
  kj::Promise<void> follow(kj::AsyncIoStream& control);
  void open(uint64_t session, const std::string& peer, const RelayNonce& nonce);
  void say(const std::string& line);
  void taskFailed(kj::Exception&& exception) override;

  kj::Own<ThreadIo> io_;  // first: the event loop outlives everything below
  std::string relay_;
  uint16_t asked_port_;
  Adopt adopt_;
  std::function<void(const std::string&)> on_event_;
  std::shared_ptr<const NodeCredentials> credentials_;
  uint16_t held_port_ = 0;
  kj::TaskSet tasks_;  // last: destroyed first
};

}  // namespace ravnest::wire
