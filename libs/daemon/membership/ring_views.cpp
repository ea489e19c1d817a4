#include "libs/daemon/membership/ring_views.h"

#include <algorithm>
#include <stdexcept>

namespace ravnest::daemon {

void RingViews::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  coordinated_ = false;
  ended_ = false;
  epoch_ = 0;
  views_.clear();
  run_from_.clear();
  completed_.clear();
  changed_.notify_all();
}

std::string RingViews::set(uint64_t epoch, const std::map<int, config::RingMembership>& views) {
  return set(epoch, views, {});
}

std::string RingViews::set(uint64_t epoch, const std::map<int, config::RingMembership>& views,
                           const std::map<int, uint64_t>& run_from) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch == 0) {
    coordinated_ = true;
    return "";
  }
  if (epoch <= epoch_) {
    return "ring membership epoch " + std::to_string(epoch) + " is not above this node's " +
           std::to_string(epoch_) + " (a late message)";
  }
  coordinated_ = true;
  epoch_ = epoch;
  for (const auto& [id, view] : views) views_[id] = view;
  // A ring named without a round forgets the last one: it belonged to an older membership.
  for (const auto& [id, view] : views) {
    auto round = run_from.find(id);
    if (round == run_from.end()) {
      run_from_.erase(id);
    } else {
      run_from_[id] = {epoch, round->second};
    }
  }
  changed_.notify_all();
  return "";
}

bool RingViews::coordinated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return coordinated_;
}

uint64_t RingViews::epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_;
}

config::RingMembership RingViews::view(const config::RingMembership& ring, uint64_t* epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch) *epoch = epoch_;
  auto it = views_.find(ring.id);
  if (it == views_.end()) return ring;
  config::RingMembership seen = it->second;
  seen.parameters = ring.parameters;
  return seen;
}

bool RingViews::wait_newer(uint64_t epoch, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return epoch_ > epoch || ended_; });
  return epoch_ > epoch;
}

void RingViews::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  ended_ = true;
  changed_.notify_all();
}

bool RingViews::ended() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

std::optional<uint64_t> RingViews::run_from(int ring, uint64_t* given_at) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = run_from_.find(ring);
  if (it == run_from_.end()) return std::nullopt;
  if (given_at) *given_at = it->second.epoch;
  return it->second.round;
}

void RingViews::completed(int ring, uint64_t rounds) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t& done = completed_[ring];
  done = std::max(done, rounds);
}

std::map<int, uint64_t> RingViews::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

}  // namespace ravnest::daemon
