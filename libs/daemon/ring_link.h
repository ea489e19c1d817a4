// RingLink: the RingTransport of one ring member over the daemons' Cap'n Proto connections.
//
// send() streams a segment into the RingSink the next member opened for this ring (one call
// on the RPC thread; the message refers to the caller's memory instead of copying it) and
// returns when the stream's flow control lets the next one go; flush() waits until the next
// member has taken every segment, and drops the connection when it cannot tell; recv() waits in
// the node's RingMailbox, checking every second that the previous member still answers, so a
// member that died is named within seconds and nobody hangs. A call that fails drops the
// connection it went over (wire::PeerLinks::watch): the ring set up at the next reduce, or the
// next job, connects anew.
#pragma once

#include <cstdint>
#include <string>

#include <kj/async.h>
#include <kj/timer.h>

#include "libs/daemon/ring_mailbox.h"
#include "libs/ring/ring_transport.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::runtime {

struct RingPeerAddress {
  std::string name;  // "node_3", for messages
  std::string address;
};

class RingLink final : public RingTransport {
 public:
  // `traffic` counts the segments sent.
  RingLink(const kj::Executor& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
           kj::Timer& timer, RingMailbox& mailbox, uint32_t ring, int self_node,
           RingPeerAddress next, RingPeerAddress prev);

  ~RingLink() noexcept(false) override;  // drops the sink on the RPC thread, where it lives

  void send(const RingTag& tag, const void* data, size_t bytes) override;
  void recv(const RingTag& tag, void* data, size_t bytes) override;
  void flush() override;

 private:
  const kj::Executor& rpc_;
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  kj::Timer& timer_;
  RingMailbox& mailbox_;
  uint32_t ring_;
  int self_node_;
  RingPeerAddress next_;
  RingPeerAddress prev_;
  kj::Maybe<schema::RingSink::Client> sink_;  // on the next member; touched on the RPC thread only
};

}  // namespace ravnest::runtime
