// RingMedium: how one ring link's segments travel from this member to its next member, chosen
// once when the link opens the ring on the next member (Node.openRing; media_choice.h picks it)
// and kept until the link drops it. One file per medium, as NCCL's src/transport/ and Gloo's
// gloo/transport/{tcp,uv,ibverbs}/ hold one per medium:
//   segment_calls_medium   every segment a RingSink.segment call on the next member (any host)
//   shared_memory_medium   the segment in a slot of memory both map, announced by a call (one host)
//   data_channel_medium    a TCP connection of the link's own, plain or sealed (wire/data_channel.h)
// beside what they share: ring_sink_calls (the sink on the next member and its window of
// unanswered calls), ring_sink_server (the receiving end of the sink's calls), media_choice (the
// choice, as plain functions) and ring_opener (the open that makes it).
// RingLink (ring_link.h) keeps what is the ring's and not the medium's: opening (through
// RingOpener), the previous member's liveness, the abort reasons and the errors' names; it calls
// the medium below for every segment it sends.
//
// Threads: send(), flush() and confirm_delivered() run on the ring's sending thread (the
// all-reduce's sender thread; flush() and confirm_delivered() on the thread that ran the
// reduce, once the sender thread is drained), never on the RPC thread; a medium that calls the
// next member hops there through RpcThread::call and blocks until its call is made (and, past
// its window of unanswered calls, answered). The destructor runs on the thread that lets the
// link go (the compute thread or the ring's) and lets go, on the RPC thread, of what lives there.
//
// Ownership: RingLink owns its medium; a medium owns its connection to the next member (the
// RingSink capability the open returned, or the data channel) and borrows the link's memory
// (the shared slots, the mailbox it checks for aborts).
//
// Errors: a kj::Exception from a call (RingLink names the peer and the ring), ring::RingError
// when the medium already named it (flush() then dropped what may still read the caller's
// memory), and MediumBroken when the medium's own connection broke: RingLink then drops the
// medium (the next reduce opens the ring anew) and prefers the ring's abort reason, which names
// the member that failed first, to the broken connection's.
//
// A new medium (a relay through a third node for providers behind NAT, a GPU path) is:
//   1. its offer in Node.openRing (schemas/ravnest.capnp) and the receiver's answer to it:
//      media_choice.h's MediaOffered/MediaAccepted, accept_media() and kMediumPreference;
//   2. one file here with a RingMedium (and what its offer carries);
//   3. its case in RingOpener::open (ring_opener.cpp), which builds the chosen medium;
//   4. on the receiving side, a way into the node's RingMailbox, where the ring's thread waits:
//      segments left there from the RPC thread (as RingSinkServer does), or a stream the ring's
//      thread reads itself (as the data channel the daemon's listener hands over).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "libs/ring/ring_transport.h"
#include "libs/wire/data_channel.h"

namespace ravnest::daemon {

// A ring member as its neighbours name it.
struct RingPeerAddress {
  std::string name;  // "node_3", for messages
  std::string address;
};

// The medium's own connection broke (RingLink drops the medium; see above).
class MediumBroken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RingMedium {
 public:
  virtual ~RingMedium() noexcept(false) = default;

  // For logs and messages: "segment calls", "shared memory", "data channel".
  virtual const char* name() const = 0;

  // Sends segment `tag` (`bytes` at `data`) to the next member; as ring::RingTransport::send (it
  // may go on reading `data` until flush() returns, and blocks for flow control). `relayable`:
  // the all-gather's segment (RingTransport::send_relayable); `kept`: the same segment as it came
  // sealed from the previous member (RingLink::relay), which a medium that seals may pass on
  // unchanged. Media that do not seal send `data` either way.
  virtual void send(const ring::RingTag& tag, const void* data, size_t bytes, bool relayable,
                    const wire::SealedFrame* kept) = 0;
  // As RingTransport::flush: returns once nothing reads the memory given to send().
  virtual void flush() = 0;
  // As RingTransport::confirm_delivered: returns once the next member took every segment of
  // `round`, the last one sent. Media whose flush() waits for the answers need nothing here.
  virtual void confirm_delivered(uint64_t round) { (void)round; }
};

}  // namespace ravnest::daemon
