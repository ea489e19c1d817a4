#include "libs/daemon/membership/membership_service.h"

#include <algorithm>
#include <map>
#include <string>

#include <spdlog/spdlog.h>

#include "libs/membership/ring_view.h"
#include "libs/wire/membership_codec.h"

namespace ravnest::daemon {

namespace {

// The views of a setRings, by ring id, and the round each ring runs from where named; throws
// std::runtime_error naming the ring for a malformed view or a ring that is not `self`'s.
void decode_views(capnp::List<schema::RingView>::Reader list, const config::NodeMetadata& self,
                  std::map<int, config::RingMembership>& views,
                  std::map<int, uint64_t>& run_from) {
  for (auto v : list) {
    membership::RingView decoded = wire::decode_ring_view(v);
    config::RingMembership& view = decoded.ring;
    const bool known =
        std::any_of(self.rings.begin(), self.rings.end(),
                    [&](const config::RingMembership& r) { return r.id == view.id; });
    if (!known) {
      throw std::runtime_error("ring " + std::to_string(view.id) +
                               ": not one of this node's rings");
    }
    if (decoded.run_from) run_from[view.id] = *decoded.run_from;
    views[view.id] = std::move(view);
  }
}

}  // namespace

kj::Promise<void> MembershipService::set_rings(SetRingsCall context) {
  auto params = context.getParams();
  const uint64_t job_id = params.getJobId();
  const std::string mismatch = job_.job_mismatch(job_id, true);
  if (!mismatch.empty()) return KJ_EXCEPTION(FAILED, "setRings: " + mismatch);
  std::map<int, config::RingMembership> views;
  std::map<int, uint64_t> run_from;
  try {
    decode_views(params.getViews(), job_.metadata(), views, run_from);
  } catch (const std::exception& e) {
    return KJ_EXCEPTION(FAILED, std::string("setRings: ") + e.what());
  }
  const uint64_t epoch = params.getEpoch();
  const std::string refused = rings_.views().set(epoch, views, run_from);
  if (!refused.empty()) return KJ_EXCEPTION(FAILED, "setRings: " + refused);
  // A reduce still running over an older membership of these rings may wait for a member that
  // is gone or stopped without failing (a dropped cluster's node that was not in a reduce tells
  // no one): it ends now and runs again over this one.
  for (const auto& [ring, view] : views) {
    if (epoch == 0) break;  // epoch 0 names no membership (views sent with it are ignored)
    rings_.mailbox().abort(static_cast<uint32_t>(ring),
                           "ring membership epoch " + std::to_string(epoch) + " replaced it",
                           epoch - 1);
  }
  if (epoch == 0) {
    job_.stop_watching_other_clusters();
    spdlog::info("job {}: the requester coordinates the rings' membership", job_id);
  } else {
    std::string from;
    for (const auto& [ring, round] : run_from) {
      from += (from.empty() ? "; runs from round " : ", ") + std::to_string(round) + " (ring " +
              std::to_string(ring) + ")";
    }
    spdlog::info("job {}: ring membership epoch {} ({} rings{})", job_id, epoch, views.size(),
                 from);
  }
  return kj::READY_NOW;
}

kj::Promise<void> MembershipService::ring_rounds(RingRoundsCall context) {
  const uint64_t job_id = context.getParams().getJobId();
  const std::string mismatch = job_.job_mismatch(job_id, false);
  if (!mismatch.empty()) return KJ_EXCEPTION(FAILED, "ringRounds: " + mismatch);
  const auto completed = rings_.views().completed();
  wire::encode_completed_rounds(
      completed, context.getResults().initRings(static_cast<unsigned>(completed.size())));
  return kj::READY_NOW;
}

}  // namespace ravnest::daemon
