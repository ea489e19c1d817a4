// RingSinkCalls: the RingSink a ring link opened on its next member (Node.openRing) and its
// window of unanswered calls, which the two media that call the sink share (segment calls, and
// shared memory, whose calls announce the slots). Every medium holds one: a data channel's link
// keeps its sink too, which holds the ring's stream slot on the next member.
//
// A segment's call is answered once the next member's all-reduce took its bytes, so at most
// `in_flight` segments wait there per ring and the link never idles while the receiver adds:
// call() returns at once while fewer than `in_flight` calls are unanswered, else when the oldest
// is. A call that fails drops the connection it went over (wire::PeerLinks::watch).
//
// Threads: set() on the RPC thread (inside RingOpener's openRing call); call() and flush() on
// the ring's sending thread, each one hop to the RPC thread through RpcThread::call, blocking;
// the sink and the window are touched on the RPC thread only. The destructor, on any thread
// but the RPC thread, lets them go there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>

#include <kj/async.h>

#include "libs/daemon/rings/media/ring_medium.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/wire/peer_links.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class RingSinkCalls {
 public:
  RingSinkCalls(RpcThread& rpc, wire::PeerLinks& links, RingPeerAddress next, size_t in_flight);
  ~RingSinkCalls() noexcept(false);
  RingSinkCalls(const RingSinkCalls&) = delete;
  RingSinkCalls& operator=(const RingSinkCalls&) = delete;

  // RPC thread: the sink openRing returned (pipelined: calls may follow before its answer).
  void set(schema::RingSink::Client sink) { sink_ = kj::mv(sink); }

  // Makes the call `make` builds on the sink (RPC thread) and returns as described above.
  // Throws the kj::Exception of a call that failed.
  void call(const std::function<kj::Promise<void>(schema::RingSink::Client&)>& make);
  // Waits (10 s at most) for every call; when it cannot tell, drops the connection, so that
  // nothing reads the caller's memory once it lets it go, and throws ring::RingError naming the
  // next member.
  void flush();

  size_t in_flight_limit() const { return in_flight_limit_; }
  const RingPeerAddress& next() const { return next_; }

 private:
  RpcThread& rpc_;
  wire::PeerLinks& links_;
  RingPeerAddress next_;
  size_t in_flight_limit_;
  kj::Maybe<schema::RingSink::Client> sink_;  // on the next member
  std::deque<kj::Promise<void>> in_flight_;   // the unanswered calls, oldest first
};

}  // namespace ravnest::daemon
