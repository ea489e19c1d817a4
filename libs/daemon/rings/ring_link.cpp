#include "libs/daemon/rings/ring_link.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <capnp/orphan.h>
#include <spdlog/spdlog.h>

#include "libs/wire/kj_reason.h"
#include "libs/wire/resolved_client.h"

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
      self_node_(self_node),
      next_(std::move(next)),
      prev_(std::move(prev)),
      in_flight_limit_(std::max<size_t>(1, in_flight)),
      channels_(channels) {
  if (shared_slot_bytes == 0) return;
  try {
    shared_ = std::make_unique<SharedSegmentsWriter>(static_cast<uint32_t>(in_flight_limit_),
                                                     shared_slot_bytes);
  } catch (const std::exception& e) {
    spdlog::warn("ring {}: segments go through the connection: {}", ring_, e.what());
  }
}

RingLink::~RingLink() noexcept(false) {
  if (sink_ == nullptr) return;
  try {
    rpc_.call([&]() {
      in_flight_.clear();
      sink_ = nullptr;
    });
  } catch (const kj::Exception&) {
    // The RPC loop is gone (shutdown); so is the connection the sink belonged to.
  }
}

void RingLink::open_sink() {
  bool opened_now = false;
  rpc_.call([&]() -> kj::Promise<void> {
    if (sink_ != nullptr) return kj::READY_NOW;
    opened_now = true;
    auto request = links_.node(next_.address).openRingRequest();
    request.setRing(ring_);
    request.setFromNode(self_node_);
    if (shared_ != nullptr) {
      const auto& offer = shared_->offer();
      auto shared = request.initShared();
      shared.setPid(offer.pid);
      shared.setFd(offer.fd);
      shared.setNonce(capnp::Data::Reader(
          reinterpret_cast<const kj::byte*>(offer.nonce.data()), offer.nonce.size()));
      shared.setSlots(offer.slots);
      shared.setSlotBytes(offer.slot_bytes);
    }
    channel_accepted_ = false;
    if (channels_ != ChannelMode::kOff) {
      // Fresh for every open: a token opens one connection, a key seals one channel.
      channel_token_ = wire::random_bytes(wire::kChannelTokenBytes);
      channel_key_ = channels_ == ChannelMode::kSealed ? wire::random_bytes(wire::kChannelKeyBytes)
                                                       : std::string();
      auto channel = request.initChannel();
      channel.setToken(capnp::Data::Reader(
          reinterpret_cast<const kj::byte*>(channel_token_.data()), channel_token_.size()));
      channel.setKey(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(channel_key_.data()),
                                         channel_key_.size()));
    }
    auto opened = request.send();
    sink_ = opened.getSink();  // pipelined: segments may follow before the answer
    shared_accepted_ = false;
    if (shared_ == nullptr && channels_ == ChannelMode::kOff) return kj::READY_NOW;
    return links_
        .watch(next_.address,
               opened.then([this](capnp::Response<schema::Node::OpenRingResults>&& answer) {
                 shared_accepted_ = shared_ != nullptr && answer.getSharedAccepted();
                 channel_accepted_ = !shared_accepted_ && answer.getChannelAccepted();
                 if (shared_accepted_) {
                   spdlog::info("ring {}: {} runs on this host: segments through shared memory",
                                ring_, next_.name);
                 }
               }))
        .exclusiveJoin(rpc_.timer().afterDelay(10 * kj::SECONDS).then([]() {
          kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 10 s"));
        }));
  });
  if (opened_now && channel_accepted_) connect_channel();
}

void RingLink::connect_channel() {
  out_.reset();
  try {
    out_ = wire::DataChannel::connect(next_.address, channel_token_, channel_key_);
    if (!channel_logged_) {
      channel_logged_ = true;
      spdlog::info("ring {}: segments to {} over a data channel ({})", ring_, next_.name,
                   out_->sealed() ? "AES-256-GCM" : "plain, --insecure");
    }
  } catch (const std::exception& e) {
    // The RPC path still works; the receiver takes segments from either.
    spdlog::warn("ring {}: no data channel to {} ({}): segments go as RPC calls", ring_,
                 next_.name, e.what());
  }
  channel_key_.assign(channel_key_.size(), '\0');
}

void RingLink::drop_out_channel() {
  out_.reset();
  try {
    rpc_.call([&]() {
      in_flight_.clear();
      sink_ = nullptr;
    });
  } catch (const kj::Exception&) {
  }
}

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
    if (out_ == nullptr) open_sink();  // a channel, once connected, needs no RPC per segment
    if (out_ != nullptr) {
      last_round_ = tag.round;
      try {
        const wire::ChannelFrame frame{tag.round, tag.step, tag.segment, bytes};
        const auto idle = [&]() { mailbox_.check_aborted(ring_, tag.round); };
        if (kept != nullptr && out_->sealed()) {
          out_->relay(frame, *kept, idle);
        } else {
          out_->send(frame, data, idle, relayable);
        }
      } catch (const std::exception& e) {
        drop_out_channel();
        throw_abort_or(tag.round,
                       ring::RingError("cannot send to " + next_.name + " (" + next_.address +
                                           ") in ring " + std::to_string(ring_) + ": " + e.what(),
                                       next_.name));
      }
      traffic_.sent(wire::TrafficKind::kRings, bytes);
      return;
    }
    const bool shared = shared_accepted_ && bytes <= shared_->offer().slot_bytes;
    // On entry fewer than in_flight_limit_ calls are unanswered (the previous send waited for
    // the oldest otherwise), so the call in_flight_limit_ before this one, the slot's previous
    // user, has been answered: the receiver no longer reads the slot.
    const uint32_t slot = static_cast<uint32_t>(calls_ % in_flight_limit_);
    if (shared && bytes > 0) std::memcpy(shared_->slot(slot), data, bytes);
    ++calls_;
    rpc_.call([&]() -> kj::Promise<void> {
      KJ_IF_MAYBE(open, sink_) {
        *open = wire::resolved_client(kj::mv(*open));  // segments sent without a copy
      }
      auto& sink = KJ_ASSERT_NONNULL(sink_);
      auto tagged = [&](auto request) {
        request.setRound(tag.round);
        request.setStep(tag.step);
        request.setSegment(tag.segment);
        return request;
      };
      kj::Promise<void> call = nullptr;
      if (shared) {
        auto request = tagged(sink.sharedSegmentRequest());
        request.setSlot(slot);
        request.setBytes(bytes);
        traffic_.sent(wire::TrafficKind::kRings, bytes);
        call = request.send().ignoreResult();
      } else {
        auto request = tagged(sink.segmentRequest());
        const capnp::Data::Reader view(static_cast<const kj::byte*>(data), bytes);
        if (reinterpret_cast<uintptr_t>(data) % 8 == 0 && bytes % 8 == 0) {
          // No copy: flush() keeps the memory in use until the receiver has taken it.
          auto orphanage = capnp::Orphanage::getForMessageContaining(
              static_cast<schema::RingSink::SegmentParams::Builder>(request));
          request.adoptData(orphanage.referenceExternalData(view));
        } else {
          request.setData(view);  // the message's words would run past the caller's bytes
        }
        traffic_.sent(wire::TrafficKind::kRings, request.totalSize().wordCount * 8);
        call = request.send().ignoreResult();
      }
      // Evaluated eagerly so that a failed call drops its connection at once; its error waits
      // here for whoever waits for the call.
      in_flight_.push_back(links_.watch(next_.address, kj::mv(call)).eagerlyEvaluate(nullptr));
      if (in_flight_.size() < in_flight_limit_) return kj::READY_NOW;
      auto oldest = kj::mv(in_flight_.front());
      in_flight_.pop_front();
      return oldest;
    });
  } catch (const kj::Exception& e) {
    throw ring::RingError("cannot send to " + next_.name + " (" + next_.address + ") in ring " +
                        std::to_string(ring_) + ": " + wire::kj_reason(e),
                    next_.name);
  }
}

void RingLink::confirm_delivered() {
  if (out_ != nullptr) {
    // The reduce ends when the next member took every segment, as the RPC path's answers say.
    try {
      out_->wait_acknowledged([&]() { mailbox_.check_aborted(ring_, last_round_); });
    } catch (const std::exception& e) {
      drop_out_channel();
      throw_abort_or(last_round_,
                     ring::RingError("cannot confirm the ring's segments with " + next_.name +
                                         " (" + next_.address + "): " + e.what(),
                                     next_.name));
    }
  }
}

void RingLink::flush() {
  // The sender thread is done (the all-reduce drained it): what was kept and not relayed
  // belonged to this run, which is over.
  relays_.clear();
  try {
    rpc_.call([&]() -> kj::Promise<void> {
      if (in_flight_.empty()) return kj::READY_NOW;
      auto calls = kj::heapArrayBuilder<kj::Promise<void>>(in_flight_.size());
      for (auto& call : in_flight_) calls.add(kj::mv(call));
      in_flight_.clear();
      return kj::joinPromises(calls.finish())
          .exclusiveJoin(rpc_.timer().afterDelay(10 * kj::SECONDS).then([]() {
            kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 10 s"));
          }));
    });
  } catch (const kj::Exception& e) {
    // The connection may still hold segments that point into the caller's memory: close it, so
    // that nothing reads that memory once the caller lets it go.
    try {
      rpc_.call([&]() {
        in_flight_.clear();
        sink_ = nullptr;
        links_.drop(next_.address);
      });
    } catch (const kj::Exception&) {
    }
    throw ring::RingError("cannot confirm the ring's segments with " + next_.name + " (" +
                        next_.address + "): " + wire::kj_reason(e),
                    next_.name);
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
