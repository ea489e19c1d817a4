#include "libs/daemon/rings/relay_store.h"

namespace ravnest::daemon {

void RelayStore::wipe(wire::SealedFrame& frame) {
  frame.key.assign(frame.key.size(), '\0');
  frame.key.clear();
}

std::optional<wire::SealedFrame> RelayStore::lend() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!spare_.empty()) {
    wire::SealedFrame frame = std::move(spare_.back());
    spare_.pop_back();
    ++in_use_;
    return frame;
  }
  if (in_use_ >= capacity_) return std::nullopt;
  ++in_use_;
  return wire::SealedFrame{};
}

void RelayStore::keep(const ring::RingTag& tag, wire::SealedFrame frame) {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_.emplace_back(tag, std::move(frame));
}

std::optional<wire::SealedFrame> RelayStore::take(const ring::RingTag& tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->first == tag) {
      wire::SealedFrame frame = std::move(it->second);
      kept_.erase(it);
      return frame;
    }
  }
  return std::nullopt;
}

void RelayStore::give_back(wire::SealedFrame frame) {
  wipe(frame);
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_use_ > 0) --in_use_;
  spare_.push_back(std::move(frame));
}

void RelayStore::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [tag, frame] : kept_) {
    wipe(frame);
    if (in_use_ > 0) --in_use_;
    spare_.push_back(std::move(frame));
  }
  kept_.clear();
}

}  // namespace ravnest::daemon
