#include "libs/daemon/rings/ring_views.h"

namespace ravnest::daemon {

void RingViews::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  coordinated_ = false;
  epoch_ = 0;
  views_.clear();
  changed_.notify_all();
}

std::string RingViews::set(uint64_t epoch, const std::map<int, config::RingMembership>& views) {
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
  return changed_.wait_for(lock, timeout, [&] { return epoch_ > epoch; });
}

}  // namespace ravnest::daemon
