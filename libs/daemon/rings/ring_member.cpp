#include "libs/daemon/rings/ring_member.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "libs/base/printable.h"
#include "libs/daemon/rings/media/media_choice.h"
#include "libs/daemon/rings/media/ring_sink_server.h"
#include "libs/daemon/rings/ring_link.h"
#include "libs/daemon/rings/shared_segments.h"
#include "libs/daemon/rpc/parked_thread.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::daemon {

ring::RingAllReduceOptions daemon_ring_options() {
  ring::RingAllReduceOptions options;
  options.segment_bytes = size_t{4} << 20;
  options.min_segment_bytes = size_t{512} << 10;
  if (const char* text = std::getenv("RAVNEST_RING_SEGMENT_BYTES")) {
    // Below what a peer accepts in one message ([limits] stream_chunk_bytes, 16 MiB by default).
    options.segment_bytes =
        std::clamp<size_t>(std::strtoull(text, nullptr, 10), 4096, size_t{8} << 20);
    options.min_segment_bytes = std::min(options.min_segment_bytes, options.segment_bytes);
  }
  return options;
}

size_t daemon_ring_in_flight() {
  size_t in_flight = 2;
  if (const char* text = std::getenv("RAVNEST_RING_IN_FLIGHT")) {
    in_flight = std::clamp<size_t>(std::strtoull(text, nullptr, 10), 1, 64);
  }
  return in_flight;
}

uint64_t daemon_ring_shared_slot_bytes(bool shared_memory) {
  return shared_memory ? daemon_ring_options().segment_bytes : 0;
}

ChannelMode daemon_ring_channels(bool insecure) {
  if (const char* text = std::getenv("RAVNEST_RING_CHANNELS"); text != nullptr && text[0] == '0') {
    return ChannelMode::kOff;
  }
  return insecure ? ChannelMode::kPlain : ChannelMode::kSealed;
}

namespace {

constexpr size_t kMaxOfferedChannels = 256;

}  // namespace


// One ring of the running job: its link, its algorithm, and (made when needed) its thread.
class RingMember::Session {
 public:
  Session(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
          RingMailbox& mailbox, const config::RingMembership& ring, int self_node,
          bool shared_memory, bool insecure)
      : size_(ring.size),
        next_(ring.next),
        prev_(ring.prev),
        link_(rpc, links, traffic, mailbox, static_cast<uint32_t>(ring.id),
              self_node, peer(ring.next), peer(ring.prev),
              daemon_ring_in_flight(), daemon_ring_shared_slot_bytes(shared_memory),
              daemon_ring_channels(insecure)),
        reduce_(link_, ring.position, ring.size, daemon_ring_options()) {}

  // The ring is the one this session was set up for (a job's metadata does not change, but a
  // caller must not be able to run a session over other members).
  bool serves(const config::RingMembership& ring) const {
    auto same = [](const config::RingPeer& a, const config::RingPeer& b) {
      return a.node == b.node && a.address == b.address;
    };
    return ring.size == size_ && ring.position == reduce_.position() && same(ring.next, next_) &&
           same(ring.prev, prev_);
  }

  ring::RingAllReduce& reduce() { return reduce_; }
  ParkedThread& thread() {
    if (!thread_) thread_ = std::make_unique<ParkedThread>();
    return *thread_;
  }

 private:
  static RingPeerAddress peer(const config::RingPeer& p) {
    return {config::node_name(p.node), p.address};
  }

  int size_;
  config::RingPeer next_;
  config::RingPeer prev_;
  RingLink link_;
  ring::RingAllReduce reduce_;                 // after link_, which it sends through
  std::unique_ptr<ParkedThread> thread_;  // joined before the algorithm goes
};

RingMember::RingMember(wire::PeerLinks& links, wire::WireTraffic& traffic, RpcThread& rpc,
                       bool shared_memory, bool insecure)
    : links_(links),
      traffic_(traffic),
      rpc_(rpc),
      shared_memory_(shared_memory),
      insecure_(insecure) {}

RingMember::~RingMember() = default;

kj::Promise<void> RingMember::open_ring(OpenRingCall context, wire::StreamSlot slot) {
  auto params = context.getParams();
  std::shared_ptr<const SharedSegmentsReader> shared;
  if (params.hasShared() && shared_memory_) {
    auto offer = params.getShared();
    auto nonce = offer.getNonce();
    std::string refusal;
    shared = SharedSegmentsReader::open(
        {offer.getPid(), offer.getFd(), std::string(nonce.asChars().begin(), nonce.size()),
         offer.getSlots(), offer.getSlotBytes()},
        refusal);
    if (shared == nullptr) {
      spdlog::debug("ring {}: {} sends through the connection ({})", params.getRing(),
                    config::node_name(params.getFromNode()), refusal);
    }
  }
  // The ring opened again: whatever channel it had belongs to an earlier link.
  mailbox_.drop_channel(params.getRing());
  MediaOffered offered;
  offered.shared_memory = params.hasShared();
  offered.data_channel = params.hasChannel();
  if (offered.data_channel) {
    offered.channel_token_bytes = params.getChannel().getToken().size();
    offered.channel_key_bytes = params.getChannel().getKey().size();
  }
  const MediaAccepted accepted = accept_media(
      offered, {shared != nullptr, daemon_ring_channels(insecure_) != ChannelMode::kOff, insecure_});
  if (accepted.data_channel) {
    auto offer = params.getChannel();
    auto token = offer.getToken();
    auto key = offer.getKey();
    const uint32_t ring = params.getRing();
    for (auto it = offered_channels_.begin(); it != offered_channels_.end();) {
      it = it->second.ring == ring ? offered_channels_.erase(it) : std::next(it);
    }
    // Full (a peer that opens rings and never connects): one offer goes, a random one, as
    // tokens are random; its sender then finds no channel and uses RPC calls.
    if (offered_channels_.size() >= kMaxOfferedChannels) {
      offered_channels_.erase(offered_channels_.begin());
    }
    offered_channels_[std::string(token.asChars().begin(), token.size())] = {
        ring, std::string(key.asChars().begin(), key.size()),
        config::node_name(params.getFromNode())};
  } else if (!accepted.channel_refusal.empty()) {
    spdlog::debug("ring {}: {} offered a data channel this daemon does not take ({})",
                  params.getRing(), config::node_name(params.getFromNode()),
                  accepted.channel_refusal);
  }
  context.getResults().setSharedAccepted(accepted.shared_memory);
  context.getResults().setChannelAccepted(accepted.data_channel);
  context.getResults().setSink(
      kj::heap<RingSinkServer>(mailbox_, traffic_, params.getRing(), kj::mv(shared))
          .attach(kj::mv(slot)));
  return kj::READY_NOW;
}

std::string RingMember::accept_channel(const std::string& token, int fd,
                                       const std::string& peer) {
  auto it = offered_channels_.find(token);
  if (it == offered_channels_.end()) {
    ::close(fd);
    return "a token no openRing offered (or one used already)";
  }
  OfferedChannel offer = std::move(it->second);
  offered_channels_.erase(it);
  try {
    auto channel = std::make_shared<wire::DataChannel>(fd, offer.key, offer.from + " (" + peer + ")");
    offer.key.assign(offer.key.size(), '\0');
    mailbox_.deposit_channel(offer.ring, std::move(channel));
  } catch (const std::exception& e) {
    return e.what();  // the channel closed the descriptor
  }
  spdlog::debug("ring {}: segments from {} come over a data channel", offer.ring, offer.from);
  return {};
}

kj::Promise<void> RingMember::abort_reduce(AbortReduceCall context) {
  auto params = context.getParams();
  // The reason ends the reduce's error, which is logged: one line, at most 1000 bytes.
  mailbox_.abort(params.getRing(), base::printable(std::string(params.getReason()), 1000),
                 params.getEpoch());
  return kj::READY_NOW;
}

RingMember::Session& RingMember::session_for(const config::RingMembership& ring,
                                             const config::NodeMetadata& self) {
  auto it = sessions_.find(ring.id);
  if (it != sessions_.end() && !it->second->serves(ring)) {
    sessions_.erase(it);
    it = sessions_.end();
  }
  if (it == sessions_.end()) {
    it = sessions_
             .emplace(ring.id, std::make_unique<Session>(rpc_, links_, traffic_, mailbox_, ring,
                                                         self.node_id, shared_memory_, insecure_))
             .first;
  }
  return *it->second;
}

void RingMember::reduce_rings(uint64_t round, std::vector<worker::WorkerPort::RingWork>& work,
                              bool average, const config::NodeMetadata& self) {
  if (work.empty()) return;
  // Cross-cluster rings (the plan's, node file's `rings`) follow the requester's membership; a
  // cluster's own rings (shared parameters, its stages) never change.
  auto cross_cluster = [&](const config::RingMembership& ring) {
    return std::any_of(self.rings.begin(), self.rings.end(),
                       [&](const config::RingMembership& r) { return r.id == ring.id; });
  };
  const bool coordinated =
      views_.coordinated() &&
      std::any_of(work.begin(), work.end(), [&](const auto& w) { return cross_cluster(*w.ring); });
  // What a reduce averages is overwritten in place: kept, so that a reduce a failed cluster
  // interrupted runs again from the same values over the clusters left.
  std::vector<std::vector<at::Tensor>> kept;
  if (coordinated) {
    for (const auto& w : work) {
      kept.emplace_back();
      for (const auto& t : w.tensors) kept.back().push_back(t.clone());
    }
  }
  // Only the rings that failed run again: the others' members are done with this round.
  std::vector<bool> pending(work.size(), true);
  // A cross-cluster ring done with this round says so at once (Node.ringRounds), even while
  // another ring of this reduce failed: the round the requester then gives it
  // (rounds_to_run_from) is the one it really runs from. Said only once the whole reduce was
  // done, a ring whose every live member had completed the round (its other member the dropped
  // cluster's, alive downstream of a dead stage, as on clusters cut apart) was given the round
  // again, which this node then ran again for no one, and the survivors' logs named a round the
  // ring did not run from.
  std::vector<bool> recorded(work.size(), false);
  auto record_completed = [&] {
    if (!coordinated) return;
    for (size_t w = 0; w < work.size(); ++w) {
      if (pending[w] || recorded[w] || !cross_cluster(*work[w].ring)) continue;
      views_.completed(work[w].ring->id, round + 1);
      kept_rounds_[work[w].ring->id] = {round, std::move(kept[w])};
      recorded[w] = true;
    }
  };
  while (true) {
    uint64_t epoch = 0;
    std::vector<config::RingMembership> seen;
    for (const auto& w : work) {
      seen.push_back(cross_cluster(*w.ring) ? views_.view(*w.ring, &epoch) : *w.ring);
    }
    if (!coordinated) epoch = 0;
    std::string error;
    if (coordinated) error = catch_up(round, work, seen, pending, average, self, epoch);
    if (error.empty()) {
      error = try_reduce({epoch, round}, work, seen, pending, average, self);
      record_completed();
    }
    if (error.empty()) return;
    if (!coordinated || views_.ended()) throw std::runtime_error(error);  // stopped: none comes
    spdlog::warn("ring reduce of round {} failed over membership epoch {} ({}); waiting up to "
                 "{} s for the requester's new membership",
                 round, epoch, error, kMembershipWaitSeconds);
    if (!views_.wait_newer(epoch, std::chrono::seconds(kMembershipWaitSeconds))) {
      if (views_.ended()) throw std::runtime_error(error);
      throw std::runtime_error(error + " (no new ring membership came within " +
                               std::to_string(kMembershipWaitSeconds) + " s)");
    }
    for (size_t w = 0; w < work.size(); ++w) {
      if (!pending[w]) continue;
      for (size_t t = 0; t < work[w].tensors.size(); ++t) work[w].tensors[t].copy_(kept[w][t]);
    }
    spdlog::info("ring reduce of round {} runs again over membership epoch {}", round,
                 views_.epoch());
  }
}

std::string RingMember::catch_up(uint64_t round, std::vector<worker::WorkerPort::RingWork>& work,
                                 const std::vector<config::RingMembership>& seen,
                                 const std::vector<bool>& pending, bool average,
                                 const config::NodeMetadata& self, uint64_t epoch) {
  std::vector<worker::WorkerPort::RingWork> again;
  std::vector<config::RingMembership> again_seen;
  std::vector<uint64_t> given;
  for (size_t w = 0; w < work.size(); ++w) {
    const int ring = work[w].ring->id;
    uint64_t given_at = 0;
    const auto from = views_.run_from(ring, &given_at);
    if (!pending[w] || !from || given_at > epoch || given_at <= run_from_followed_[ring]) continue;
    const auto kept = kept_rounds_.find(ring);
    const auto kept_round =
        kept == kept_rounds_.end() ? std::nullopt : std::optional<uint64_t>(kept->second.round);
    if (membership::round_to_run(ring, round, *from, kept_round) ==
        membership::RoundToRun::kThisRound) {
      run_from_followed_[ring] = given_at;
      continue;
    }
    if (seen[w].size <= 1) {
      // The requester asked before this ring finished round - 1 (its other member the dropped
      // cluster's, alive downstream of a dead stage), and no member is left to run it again
      // for: the ring ran that round with the dropped cluster, and runs from this one. Said in
      // a line the reference of the drop reads (tests/support/drop_reference.h).
      run_from_followed_[ring] = given_at;
      spdlog::info("ring reduce over membership epoch {}: round {} was completed before the "
                   "membership named it, and no other member is left to run it again for: runs "
                   "from round {} (ring {})",
                   epoch, round - 1, round, ring);
      continue;
    }
    worker::WorkerPort::RingWork item = work[w];
    item.tensors.clear();
    for (const auto& t : kept->second.tensors) item.tensors.push_back(t.clone());
    again.push_back(std::move(item));
    again_seen.push_back(seen[w]);
    given.push_back(given_at);
  }
  if (again.empty()) return "";
  spdlog::info("ring reduce of round {} runs again over membership epoch {} before round {}: "
               "this node completed it, another member did not",
               round - 1, epoch, round);
  std::vector<bool> all(again.size(), true);
  const std::string error =
      try_reduce({epoch, round - 1}, again, again_seen, all, average, self);
  if (!error.empty()) return error;
  for (size_t i = 0; i < again.size(); ++i) run_from_followed_[again[i].ring->id] = given[i];
  return "";
}

std::string RingMember::try_reduce(membership::EpochRound at,
                                   std::vector<worker::WorkerPort::RingWork>& work,
                                   const std::vector<config::RingMembership>& seen,
                                   std::vector<bool>& pending, bool average,
                                   const config::NodeMetadata& self) {
  const uint64_t tag = membership::encode_round_tag(at);
  std::vector<std::string> errors(work.size());
  std::vector<Session*> sessions;
  for (const auto& ring : seen) {
    // A ring of one member (the others dropped) has nothing to average with.
    const size_t w = sessions.size();
    sessions.push_back(pending[w] && ring.size > 1 ? &session_for(ring, self) : nullptr);
  }
  auto run = [&](size_t w) {
    if (sessions[w] == nullptr) return;
    try {
      sessions[w]->reduce().run(tag, work[w].tensors, average,
                                {work[w].codec, work[w].stream});
    } catch (const std::exception& e) {
      errors[w] = e.what();
    }
  };
  // The first ring runs on this thread, the others on their own, all at once.
  std::vector<size_t> threaded;
  for (size_t w = 1; w < work.size(); ++w) {
    if (sessions[w] == nullptr) continue;
    threaded.push_back(w);
    sessions[w]->thread().post([&run, w]() { run(w); });
  }
  run(0);
  for (size_t w : threaded) sessions[w]->thread().wait();

  std::string first_error;
  for (size_t w = 0; w < work.size(); ++w) {
    if (errors[w].empty()) {
      pending[w] = false;
      continue;
    }
    // A failed ring starts again from a fresh link at its next reduce.
    sessions_.erase(seen[w].id);
    tell_members(seen[w], self.name + ": " + errors[w], self, at.epoch);
    if (first_error.empty()) first_error = errors[w];
  }
  return first_error;
}

// Tells the ring's neighbours that this reduce cannot finish, so that none of them waits. A node
// knows only its neighbours (docs/node-metadata.md#rings): the abort is kept by each mailbox
// until the next job (for reduces of membership `epoch` and older ones), so each neighbour's
// reduce fails in turn and tells its own neighbours, and the abort goes round the ring both ways.
void RingMember::tell_members(const config::RingMembership& ring, const std::string& reason,
                              const config::NodeMetadata& self, uint64_t epoch) {
  try {
    rpc_.call([&]() {
      std::set<std::string> told;
      for (const config::RingPeer* peer : {&ring.next, &ring.prev}) {
        if (peer->node == self.node_id || !told.insert(peer->address).second) continue;
        auto request = links_.node(peer->address).abortReduceRequest();
        request.setRing(static_cast<uint32_t>(ring.id));
        request.setReason(reason);
        request.setEpoch(epoch);
        tasks_.add(links_.watch(peer->address, request.send().ignoreResult())
                       .catch_([](kj::Exception&&) {}));
      }
    });
  } catch (const kj::Exception&) {
  }
}

void RingMember::end_job() {
  sessions_.clear();
  kept_rounds_.clear();
  run_from_followed_.clear();
}

}  // namespace ravnest::daemon
