#include "libs/daemon/ring_link.h"

#include <capnp/orphan.h>

#include "libs/wire/kj_reason.h"

namespace ravnest::runtime {

RingLink::RingLink(const kj::Executor& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
                   kj::Timer& timer, RingMailbox& mailbox, uint32_t ring, int self_node,
                   RingPeerAddress next, RingPeerAddress prev)
    : rpc_(rpc),
      links_(links),
      traffic_(traffic),
      timer_(timer),
      mailbox_(mailbox),
      ring_(ring),
      self_node_(self_node),
      next_(std::move(next)),
      prev_(std::move(prev)) {}

RingLink::~RingLink() noexcept(false) {
  if (sink_ == nullptr) return;
  try {
    rpc_.executeSync([&]() { sink_ = nullptr; });
  } catch (const kj::Exception&) {
    // The RPC loop is gone (shutdown); so is the connection the sink belonged to.
  }
}

void RingLink::send(const RingTag& tag, const void* data, size_t bytes) {
  try {
    rpc_.executeSync([&]() -> kj::Promise<void> {
      schema::RingSink::Client* sink = nullptr;
      KJ_IF_MAYBE(open, sink_) {
        sink = open;
      } else {
        auto request = links_.node(next_.address).openRingRequest();
        request.setRing(ring_);
        request.setFromNode(self_node_);
        sink = &sink_.emplace(request.send().getSink());
      }
      auto request = sink->segmentRequest();
      request.setRound(tag.round);
      request.setStep(tag.step);
      request.setSegment(tag.segment);
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
      return links_.watch(next_.address, request.send());
    });
  } catch (const kj::Exception& e) {
    throw RingError("cannot send to " + next_.name + " (" + next_.address + ") in ring " +
                        std::to_string(ring_) + ": " + wire::kj_reason(e),
                    next_.name);
  }
}

void RingLink::flush() {
  try {
    rpc_.executeSync([&]() -> kj::Promise<void> {
      KJ_IF_MAYBE(sink, sink_) {
        return sink->syncRequest().send().ignoreResult().exclusiveJoin(
            timer_.afterDelay(10 * kj::SECONDS).then([]() {
              kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 10 s"));
            }));
      }
      return kj::READY_NOW;
    });
  } catch (const kj::Exception& e) {
    // The connection may still hold segments that point into the caller's memory: close it, so
    // that nothing reads that memory once the caller lets it go.
    try {
      rpc_.executeSync([&]() {
        sink_ = nullptr;
        links_.drop(next_.address);
      });
    } catch (const kj::Exception&) {
    }
    throw RingError("cannot confirm the ring's segments with " + next_.name + " (" +
                        next_.address + "): " + wire::kj_reason(e),
                    next_.name);
  }
}

void RingLink::recv(const RingTag& tag, void* data, size_t bytes) {
  auto check_alive = [&]() {
    try {
      rpc_.executeSync([&]() -> kj::Promise<void> {
        auto answer = links_.node(prev_.address).statusRequest().send().ignoreResult();
        return links_.watch(prev_.address,
                            answer.exclusiveJoin(timer_.afterDelay(3 * kj::SECONDS).then([]() {
                              kj::throwFatalException(
                                  KJ_EXCEPTION(DISCONNECTED, "no answer for 3 s"));
                            })));
      });
    } catch (const kj::Exception& e) {
      throw RingError(prev_.name + " (" + prev_.address + ") failed during the reduce of ring " +
                          std::to_string(ring_) + ": " + wire::kj_reason(e),
                      prev_.name);
    }
  };
  try {
    mailbox_.take({ring_, tag.round, tag.step, tag.segment}, data, bytes, check_alive);
  } catch (const RingError&) {
    throw;
  } catch (const std::exception& e) {
    throw RingError(e.what());
  }
}

}  // namespace ravnest::runtime
