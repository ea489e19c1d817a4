// RingSinkServer: the receiving end of the two media that call the sink (segment calls and
// shared memory, ring_medium.h): one ring's segments from its previous member, as Node.openRing
// returned the sink (RingMember::open_ring).
//
// A segment's call stays open until the all-reduce has taken the bytes out of the message
// (added them, or copied them into place): no copy on receipt, and the sender's limit on
// unanswered calls bounds what waits here. With the sender's memory (`shared`, when it runs on
// this host and its offer was mapped) the bytes are read where the sender put them, and the
// mapping stays until the last segment in it was taken. Either way the bytes wait in the node's
// RingMailbox, where the ring's thread takes them (RingLink::recv).
//
// Threads: the calls arrive on the RPC thread; they are answered from the ring's thread, which
// fulfils them across threads once it took the bytes. Throws nothing; a sharedSegment call the
// sink cannot serve fails (FAILED) with the reason.
#pragma once

#include <cstdint>
#include <memory>

#include <kj/async.h>

#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/daemon/rings/shared_segments.h"
#include "libs/wire/wire_traffic.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class RingSinkServer final : public schema::RingSink::Server {
 public:
  // `shared`: the sender's memory, mapped (null: segments come in messages only).
  RingSinkServer(RingMailbox& mailbox, wire::WireTraffic& traffic, uint32_t ring,
                 std::shared_ptr<const SharedSegmentsReader> shared)
      : mailbox_(mailbox), traffic_(traffic), ring_(ring), shared_(std::move(shared)) {}

 protected:
  kj::Promise<void> segment(SegmentContext context) override;
  kj::Promise<void> sharedSegment(SharedSegmentContext context) override;

 private:
  // Leaves `size` bytes at `data` in the mailbox and answers the call once the all-reduce has
  // taken them; `keeps` (the shared mapping, or nothing) lives until then.
  kj::Promise<void> hold_until_taken(const RingMailbox::Key& key, const void* data, size_t size,
                                     std::shared_ptr<const void> keeps);

  RingMailbox& mailbox_;
  wire::WireTraffic& traffic_;
  uint32_t ring_;
  std::shared_ptr<const SharedSegmentsReader> shared_;
};

}  // namespace ravnest::daemon
