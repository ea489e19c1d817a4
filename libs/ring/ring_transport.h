// The transport one ring member sees: messages to the next member, messages from the previous one.
// The all-reduce algorithm (ring_allreduce.h) is written against this interface only; an
// in-process implementation is in ring_local.h, a network one lives with the node service.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace ravnest::ring {

// Names one message of one all-reduce. Within a round, (step, segment) is unique per link.
struct RingTag {
  uint64_t round = 0;    // which all-reduce (chosen by the caller, distinct per run on a ring)
  uint32_t step = 0;     // algorithm step (ring_allreduce.h: dtype group * 2(N-1) + phase step)
  uint32_t segment = 0;  // segment of the chunk sent at that step

  friend bool operator==(const RingTag& a, const RingTag& b) {
    return a.round == b.round && a.step == b.step && a.segment == b.segment;
  }
  friend bool operator!=(const RingTag& a, const RingTag& b) { return !(a == b); }
  std::string to_string() const {
    return "round " + std::to_string(round) + " step " + std::to_string(step) + " segment " +
           std::to_string(segment);
  }
};

// A failure of the ring: a peer failed or timed out, or the ring was aborted. `peer()` names the
// member the failure is about when it is known (empty otherwise); what() always names it too.
class RingError : public std::runtime_error {
 public:
  explicit RingError(const std::string& message, std::string peer = {})
      : std::runtime_error(message), peer_(std::move(peer)) {}
  const std::string& peer() const noexcept { return peer_; }

 private:
  std::string peer_;
};

class RingTransport {
 public:
  virtual ~RingTransport() noexcept(false) = default;
  // Sends `bytes` to the next member; may return before they are delivered. A transport may go
  // on reading `data` until flush() returns: the caller changes a sent region only once the ring
  // has consumed it (in the ring algorithm, a region is overwritten only by data the next member
  // produced after taking it) and calls flush() before it lets the memory go. Flow control is the
  // transport's: a slow peer makes send() block. Throws RingError when the ring fails or is
  // aborted.
  virtual void send(const RingTag& tag, const void* data, size_t bytes) = 0;
  // Returns once the transport no longer reads memory given to send(); after an error too (it
  // may drop the connection to make sure). Throws RingError when it had to.
  virtual void flush() {}
  // After a run that succeeded (flush() returned): returns once the next member has taken every
  // segment sent, so that a run ends on a member only once its successor got all of it and
  // members never disagree on whether a round completed. A transport whose sends are confirmed
  // before flush() returns (RPC calls, in process) needs nothing here. Throws RingError.
  virtual void confirm_delivered() {}
  // Receives the message with `tag` from the previous member into `data` (exactly `bytes`);
  // blocks. Throws RingError naming the peer when it fails, times out, or the ring is aborted.
  virtual void recv(const RingTag& tag, void* data, size_t bytes) = 0;
  // The same, but hands the received bytes to `use` instead of copying them out: a transport
  // that holds the message in memory (RingLink) lets the caller read it in place, which saves
  // the reduce-scatter a copy per segment. `use` runs once, on the calling thread, with exactly
  // `bytes` bytes that stay valid until it returns. By default: recv() into a buffer, then use.
  virtual void recv_in_place(const RingTag& tag, size_t bytes,
                             const std::function<void(const void*)>& use);
  // The same, in consecutive pieces: `use(offset, piece, size)` with offsets from 0 and sizes
  // that are multiples of 64 bytes (but the last), together exactly `bytes`. A transport that
  // reads a socket (RingLink over a data channel) hands each piece over while it is still in the
  // cache. By default: recv_in_place, one piece.
  virtual void recv_pieces(const RingTag& tag, size_t bytes,
                           const std::function<void(size_t, const void*, size_t)>& use);

  // The all-gather's messages go around the ring unchanged: the member that finished a chunk
  // sends each segment with send_relayable(), every member that passes it on receives it with
  // recv_to_relay() and sends it on with relay(). A transport that seals each link (RingLink
  // over a sealed data channel) then seals a segment once, under a key of its own, and passes on
  // the sealed bytes it received instead of sealing them again at every hop. By default these
  // are send(), recv() and send().
  virtual void send_relayable(const RingTag& tag, const void* data, size_t bytes) {
    send(tag, data, bytes);
  }
  // As recv(); the transport may keep the message as it came, for relay(`tag`, ...).
  virtual void recv_to_relay(const RingTag& tag, void* data, size_t bytes) {
    recv(tag, data, bytes);
  }
  // Sends on, as `tag`, the message recv_to_relay(`received`) wrote to `data` (`bytes`): what
  // the transport kept of it, or else send(tag, data, bytes). As send() (same thread, same
  // rules); called at most once per recv_to_relay, in the order received. Whatever was kept and
  // not relayed is let go by flush().
  virtual void relay(const RingTag& received, const RingTag& tag, const void* data,
                     size_t bytes) {
    (void)received;
    send(tag, data, bytes);
  }
};

}  // namespace ravnest::ring
