#include "libs/daemon/rings/ring_link.h"

#include <cstring>
#include <utility>
#include <vector>

#include "libs/wire/kj_reason.h"
#include "libs/wire/lost_connection.h"

namespace ravnest::daemon {

RingLink::RingLink(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
                   RingMailbox& mailbox, uint32_t ring, int self_node,
                   RingPeerAddress next, RingPeerAddress prev, size_t in_flight,
                   uint64_t shared_slot_bytes, ChannelMode channels)
    : rpc_(rpc),
      links_(links),
      traffic_(traffic),
      mailbox_(mailbox),
      ring_(ring),
      next_(next),
      prev_(std::move(prev)),
      opener_(rpc, links, traffic, mailbox, ring, self_node, std::move(next), in_flight,
              shared_slot_bytes, channels) {}

RingLink::~RingLink() noexcept(false) = default;

void RingLink::send(const ring::RingTag& tag, const void* data, size_t bytes) {
  send_segment(tag, data, bytes, /*relayable=*/false, nullptr);
}

void RingLink::send_relayable(const ring::RingTag& tag, const void* data, size_t bytes) {
  send_segment(tag, data, bytes, /*relayable=*/true, nullptr);
}

void RingLink::relay(const ring::RingTag& received, const ring::RingTag& tag, const void* data,
                     size_t bytes) {
  std::optional<wire::SealedFrame> kept = relays_.take(received);
  if (!kept) {
    send_segment(tag, data, bytes, /*relayable=*/true, nullptr);  // sealed again
    return;
  }
  try {
    send_segment(tag, data, bytes, /*relayable=*/true, &*kept);
  } catch (...) {
    relays_.give_back(std::move(*kept));
    throw;
  }
  relays_.give_back(std::move(*kept));
}

void RingLink::recv_to_relay(const ring::RingTag& tag, void* data, size_t bytes) {
  // Without a buffer (all in use: the sender is behind) the segment is read as recv() reads it,
  // and sealed again when it goes on.
  std::optional<wire::SealedFrame> frame = relays_.lend();
  try {
    receive(
        tag, bytes, [&](const void* src) { if (bytes > 0) std::memcpy(data, src, bytes); },
        [&](wire::DataChannel& channel, const wire::DataChannel::Idle& idle) {
          channel.recv({tag.round, tag.step, tag.segment, bytes}, data, idle,
                       frame ? &*frame : nullptr);
        });
  } catch (...) {
    if (frame) relays_.give_back(std::move(*frame));
    throw;
  }
  if (!frame) return;
  if (frame->key.empty()) {
    relays_.give_back(std::move(*frame));  // it came some other way
  } else {
    relays_.keep(tag, std::move(*frame));
  }
}

void RingLink::send_segment(const ring::RingTag& tag, const void* data, size_t bytes,
                            bool relayable, const wire::SealedFrame* kept) {
  try {
    if (medium_ == nullptr) medium_ = opener_.open();
    last_round_ = tag.round;
    medium_->send(tag, data, bytes, relayable, kept);
  } catch (const kj::Exception& e) {
    throw ring::RingError(wire::kCannotSendTo + next_.name + " (" + next_.address + ") in ring " +
                              std::to_string(ring_) + ": " + wire::kj_reason(e),
                          next_.name);
  } catch (const MediumBroken& e) {
    medium_.reset();
    throw_abort_or(tag.round,
                   ring::RingError(wire::kCannotSendTo + next_.name + " (" + next_.address +
                                       ") in ring " + std::to_string(ring_) + ": " + e.what(),
                                   next_.name));
  }
}

void RingLink::confirm_delivered() {
  if (medium_ == nullptr) return;
  try {
    medium_->confirm_delivered(last_round_);
  } catch (const MediumBroken& e) {
    medium_.reset();
    throw_abort_or(last_round_,
                   ring::RingError("cannot confirm the ring's segments with " + next_.name +
                                       " (" + next_.address + "): " + e.what(),
                                   next_.name));
  }
}

void RingLink::flush() {
  // The sender thread is done (the all-reduce drained it): what was kept and not relayed
  // belonged to this run, which is over.
  relays_.clear();
  if (medium_ == nullptr) return;
  try {
    medium_->flush();
  } catch (const ring::RingError&) {
    medium_.reset();  // it dropped its connection: the next send opens the ring anew
    throw;
  }
}

void RingLink::throw_abort_or(uint64_t round, const ring::RingError& otherwise) {
  // A member that failed ends its reduce, which closes its channels at once, and tells every
  // member why (abortReduce, over RPC): that reason names who failed first, which a closed
  // channel does not. Waited for a moment (woken as soon as it arrives) before the channel's
  // own error is the answer.
  try {
    mailbox_.wait_aborted(ring_, round, 2000);
  } catch (const std::exception& aborted) {
    throw ring::RingError(aborted.what());
  }
  throw otherwise;
}

void RingLink::check_prev_alive() {
  try {
    rpc_.call([&]() -> kj::Promise<void> {
      auto answer = links_.node(prev_.address).statusRequest().send().ignoreResult();
      return links_.watch(prev_.address,
                          answer.exclusiveJoin(rpc_.timer().afterDelay(3 * kj::SECONDS).then([]() {
                            kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 3 s"));
                          })));
    });
  } catch (const kj::Exception& e) {
    throw ring::RingError(prev_.name + " (" + prev_.address + ") failed during the reduce of ring " +
                              std::to_string(ring_) + ": " + wire::kj_reason(e),
                          prev_.name);
  }
}

void RingLink::receive(
    const ring::RingTag& tag, size_t bytes, const std::function<void(const void*)>& from_message,
    const std::function<void(wire::DataChannel&, const wire::DataChannel::Idle&)>& from_channel) {
  std::shared_ptr<wire::DataChannel> channel;
  try {
    channel = mailbox_.take_in_place_or_channel({ring_, tag.round, tag.step, tag.segment}, bytes,
                                                from_message, [&]() { check_prev_alive(); });
  } catch (const ring::RingError&) {
    throw;
  } catch (const std::exception& e) {
    throw ring::RingError(e.what());
  }
  if (channel == nullptr) return;  // it came as a message
  try {
    from_channel(*channel, [&]() {
      mailbox_.check_aborted(ring_, tag.round);
      check_prev_alive();
    });
  } catch (const ring::RingError&) {
    mailbox_.drop_channel(ring_, channel.get());
    throw;
  } catch (const std::exception& e) {
    mailbox_.drop_channel(ring_, channel.get());
    throw_abort_or(tag.round,
                   ring::RingError(prev_.name + " (" + prev_.address + "), ring " +
                                       std::to_string(ring_) + ": " + e.what(),
                                   prev_.name));
  }
  traffic_.received(wire::TrafficKind::kRings, bytes);
}

void RingLink::recv(const ring::RingTag& tag, void* data, size_t bytes) {
  receive(
      tag, bytes, [&](const void* src) { if (bytes > 0) std::memcpy(data, src, bytes); },
      [&](wire::DataChannel& channel, const wire::DataChannel::Idle& idle) {
        channel.recv({tag.round, tag.step, tag.segment, bytes}, data, idle);
      });
}

void RingLink::recv_in_place(const ring::RingTag& tag, size_t bytes,
                             const std::function<void(const void*)>& use) {
  receive(tag, bytes, use, [&](wire::DataChannel& channel, const wire::DataChannel::Idle& idle) {
    // One piece: the whole segment, gathered first (callers that can take pieces use
    // recv_pieces) into a buffer kept for the next segment: no fresh pages per call.
    if (in_place_.size() < bytes) in_place_.resize(bytes);
    channel.recv({tag.round, tag.step, tag.segment, bytes}, in_place_.data(), idle);
    use(in_place_.data());
  });
}

void RingLink::recv_pieces(const ring::RingTag& tag, size_t bytes,
                           const std::function<void(size_t, const void*, size_t)>& use) {
  receive(
      tag, bytes, [&](const void* src) { use(0, src, bytes); },
      [&](wire::DataChannel& channel, const wire::DataChannel::Idle& idle) {
        channel.recv_pieces({tag.round, tag.step, tag.segment, bytes}, use, idle);
      });
}

}  // namespace ravnest::daemon
