#include "libs/daemon/ring_member.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "libs/daemon/ring_link.h"

namespace ravnest::runtime {

RingAllReduceOptions daemon_ring_options() {
  RingAllReduceOptions options;
  options.segment_bytes = size_t{4} << 20;
  if (const char* text = std::getenv("RAVNEST_RING_SEGMENT_BYTES")) {
    options.segment_bytes = std::max<size_t>(4096, std::strtoull(text, nullptr, 10));
  }
  return options;
}

namespace {

// One ring's segments from its previous member. A segment's call stays open until the
// all-reduce has copied the bytes out of the message: one copy fewer, and the stream's flow
// control then also bounds what waits here.
class RingSinkImpl final : public schema::RingSink::Server {
 public:
  RingSinkImpl(RingMailbox& mailbox, uint32_t ring) : mailbox_(mailbox), ring_(ring) {}

 protected:
  kj::Promise<void> segment(SegmentContext context) override {
    auto params = context.getParams();
    auto data = params.getData();
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
        kj::mv(paf.fulfiller));
    mailbox_.deposit_borrowed({ring_, params.getRound(), params.getStep(), params.getSegment()},
                              data.begin(), data.size(),
                              [fulfiller]() { (*fulfiller)->fulfill(); });
    return kj::mv(paf.promise);
  }

  kj::Promise<void> sync(SyncContext) override { return kj::READY_NOW; }

 private:
  RingMailbox& mailbox_;
  uint32_t ring_;
};

}  // namespace

kj::Promise<void> RingMember::open_ring(OpenRingCall context) {
  auto params = context.getParams();
  secret_.check(params.getSecret(), "openRing");
  context.getResults().setSink(kj::heap<RingSinkImpl>(mailbox_, params.getRing()));
  return kj::READY_NOW;
}

kj::Promise<void> RingMember::abort_reduce(AbortReduceCall context) {
  auto params = context.getParams();
  secret_.check(params.getSecret(), "abortReduce");
  mailbox_.abort(params.getRing(), params.getReason());
  return kj::READY_NOW;
}

void RingMember::reduce_rings(uint64_t round, std::vector<WorkerPort::RingWork>& work,
                              bool average, const config::NodeMetadata& self) {
  std::vector<std::string> errors(work.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < work.size(); ++w) {
    threads.emplace_back([this, round, average, &work, &errors, &self, w]() {
      const auto& ring = *work[w].ring;
      const size_t n = ring.peers.size();
      const auto& next = ring.peers[(ring.position + 1) % n];
      const auto& prev = ring.peers[(ring.position + n - 1) % n];
      try {
        RingLink link(*loop_.executor, links_, *loop_.timer, mailbox_,
                      static_cast<uint32_t>(ring.id), self.node_id,
                      {"node_" + std::to_string(next.node), next.address},
                      {"node_" + std::to_string(prev.node), prev.address});
        RingAllReduceOptions options = daemon_ring_options();
        options.average = average;
        RingAllReduce reduce(link, ring.position, static_cast<int>(n), options);
        reduce.run(round, work[w].tensors);
      } catch (const std::exception& e) {
        errors[w] = e.what();
        // Tell the other members, so that none of them waits for a round that cannot finish.
        const std::string reason = self.name + ": " + e.what();
        try {
          loop_.executor->executeSync([&]() {
            for (const auto& peer : ring.peers) {
              if (peer.node == self.node_id) continue;
              auto request = links_.node(peer.address).abortReduceRequest();
              request.setSecret(links_.secret());
              request.setRing(static_cast<uint32_t>(ring.id));
              request.setReason(reason);
              tasks_.add(links_.watch(peer.address, request.send().ignoreResult())
                             .catch_([](kj::Exception&&) {}));
            }
          });
        } catch (const kj::Exception&) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& error : errors) {
    if (!error.empty()) throw std::runtime_error(error);
  }
}

}  // namespace ravnest::runtime
