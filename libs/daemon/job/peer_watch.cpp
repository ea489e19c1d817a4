#include "libs/daemon/job/peer_watch.h"

#include "libs/base/clock.h"
#include "libs/wire/lost_connection.h"
#include "libs/wire/node_report.h"
#include "libs/wire/transfer_codec.h"

namespace ravnest::daemon {

void PeerWatch::watch(uint64_t job_id, std::vector<Peer> peers, std::function<bool()> running,
                      std::function<void(const std::string&)> fail,
                      std::function<void(const std::string&)> stopped) {
  stop();
  job_id_ = job_id;
  peers_ = std::move(peers);
  running_ = std::move(running);
  fail_ = std::move(fail);
  stopped_ = std::move(stopped);
  failed_ = false;
  last_answer_.clear();
  const double now = base::now_seconds();
  for (const auto& peer : peers_) last_answer_[peer.address] = now;
  if (peers_.empty()) return;
  tasks_.add(canceler_.wrap(tick()).catch_([](kj::Exception&&) {}));
}

void PeerWatch::forget(const std::set<std::string>& addresses) {
  // Not while a tick iterates peers_: ask() promises refer to elements by reference.
  tasks_.add(kj::evalLater([this, addresses]() {
    std::vector<Peer> kept;
    for (auto& peer : peers_) {
      if (!addresses.count(peer.address)) kept.push_back(std::move(peer));
    }
    peers_ = std::move(kept);
  }));
}

void PeerWatch::report(const std::string& why) {
  if (failed_) return;
  failed_ = true;
  fail_(why);
}

void PeerWatch::report_stopped(const std::string& reason) {
  if (failed_) return;
  failed_ = true;
  stopped_(reason);
}

kj::Promise<void> PeerWatch::tick() {
  return rpc_.timer().afterDelay(1 * kj::SECONDS).then([this]() -> kj::Promise<void> {
    if (failed_ || !running_()) return kj::READY_NOW;
    auto asks = kj::heapArrayBuilder<kj::Promise<void>>(peers_.size());
    for (const auto& peer : peers_) asks.add(ask(peer));
    return kj::joinPromises(asks.finish()).then([this]() -> kj::Promise<void> {
      if (failed_ || !running_()) return kj::READY_NOW;
      const double now = base::now_seconds();
      for (const auto& peer : peers_) {
        if (now - last_answer_[peer.address] > kSilenceSeconds) {
          report(peer.name + " (" + peer.address + wire::kStoppedAnswering);
          return kj::READY_NOW;
        }
      }
      return tick();
    });
  });
}

// One status call, answered or given up within 3 s; never fails. A call that fails drops the
// connection, so that the next one connects anew (a restarted peer); one that is only late does
// not: a frozen peer's connection carries the job's transfers too, and dropping it would fail them
// with a reason that names nobody before the silence is named.
kj::Promise<void> PeerWatch::ask(const Peer& peer) {
  auto answered = links_.node(peer.address)
                      .statusRequest()
                      .send()
                      .then([this, peer](capnp::Response<schema::Node::StatusResults>&& response) {
                        const auto s = wire::decode_status(response.getStatus());
                        if (s.job_id == job_id_ && s.state == wire::NodeState::kIdle) {
                          // Only a stop makes a node drop its job and go idle: the requester
                          // stopped it (after a failure, say), and stops it everywhere.
                          std::string reason = s.error;
                          const std::string by = "stopped by the requester: ";
                          if (reason.rfind(by, 0) == 0) reason.erase(0, by.size());
                          report_stopped(reason.empty() ? peer.name + " was stopped"
                                                        : reason);
                        } else if (s.job_id != job_id_) {
                          report(peer.name + " (" + peer.address +
                                 ") is no longer running the job (restarted or stopped)");
                        } else if (s.state == wire::NodeState::kFailed) {
                          report(peer.name + " failed: " + s.error);
                        } else {
                          last_answer_[peer.address] = base::now_seconds();
                        }
                      })
                      .catch_([this, address = peer.address](kj::Exception&&) {
                        // Later, not from inside the failed call.
                        tasks_.add(kj::evalLater([this, address]() { links_.drop(address); }));
                      });
  auto timeout = rpc_.timer().afterDelay(3 * kj::SECONDS);
  return answered.exclusiveJoin(kj::mv(timeout));
}

}  // namespace ravnest::daemon
