#include "libs/daemon/rings/ring_mailbox.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace ravnest::daemon {

void RingMailbox::deposit_borrowed(const Key& key, const void* data, size_t size,
                                   std::function<void()> release) {
  bool aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted = !all_aborted_.empty() || ring_aborted(key) != nullptr;
    if (!aborted) segments_[key] = Segment{data, size, std::move(release)};
  }
  if (aborted) {
    if (release) release();
    return;
  }
  arrived_.notify_all();
}

void RingMailbox::take(const Key& key, void* out, size_t bytes,
                       const std::function<void()>& check_alive, int liveness_period_ms) {
  take_in_place(
      key, bytes, [&](const void* data) { if (bytes > 0) std::memcpy(out, data, bytes); },
      check_alive, liveness_period_ms);
}

void RingMailbox::take_in_place(const Key& key, size_t bytes,
                                const std::function<void(const void*)>& use,
                                const std::function<void()>& check_alive,
                                int liveness_period_ms) {
  wait(key, bytes, use, check_alive, liveness_period_ms, false);
}

std::shared_ptr<wire::DataChannel> RingMailbox::take_in_place_or_channel(
    const Key& key, size_t bytes, const std::function<void(const void*)>& use,
    const std::function<void()>& check_alive, int liveness_period_ms) {
  return wait(key, bytes, use, check_alive, liveness_period_ms, true);
}

void RingMailbox::check_aborted(uint32_t ring, uint64_t round) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!all_aborted_.empty()) throw std::runtime_error(all_aborted_);
  if (const std::string* why = ring_aborted({ring, round, 0, 0})) throw std::runtime_error(*why);
}

void RingMailbox::wait_aborted(uint32_t ring, uint64_t round, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Key key{ring, round, 0, 0};
  arrived_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return !all_aborted_.empty() || ring_aborted(key) != nullptr; });
  if (!all_aborted_.empty()) throw std::runtime_error(all_aborted_);
  if (const std::string* why = ring_aborted(key)) throw std::runtime_error(*why);
}

void RingMailbox::drop_channel(uint32_t ring, const wire::DataChannel* only) {
  std::shared_ptr<wire::DataChannel> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = channels_.find(ring);
    if (it == channels_.end() || (only != nullptr && it->second.get() != only)) return;
    dropped = std::move(it->second);
    channels_.erase(it);
  }
  dropped->shutdown();
}

void RingMailbox::deposit_channel(uint32_t ring, std::shared_ptr<wire::DataChannel> channel) {
  std::shared_ptr<wire::DataChannel> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old = std::exchange(channels_[ring], std::move(channel));
  }
  if (old != nullptr) old->shutdown();
  arrived_.notify_all();
}

std::shared_ptr<wire::DataChannel> RingMailbox::wait(const Key& key, size_t bytes,
                                                     const std::function<void(const void*)>& use,
                                                     const std::function<void()>& check_alive,
                                                     int liveness_period_ms, bool or_channel) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (!all_aborted_.empty()) throw std::runtime_error(all_aborted_);
    if (const std::string* why = ring_aborted(key)) throw std::runtime_error(*why);
    if (or_channel) {
      if (auto c = channels_.find(key.ring); c != channels_.end()) return c->second;
    }
    auto it = segments_.find(key);
    if (it != segments_.end()) {
      Segment segment = std::move(it->second);
      segments_.erase(it);
      lock.unlock();
      struct Release {  // the message goes once used, also when `use` throws
        std::function<void()>& release;
        ~Release() { if (release) release(); }
      } release{segment.release};
      if (segment.size != bytes) {
        throw std::runtime_error("ring " + std::to_string(key.ring) + ": segment of " +
                                 std::to_string(segment.size) + " bytes, expected " +
                                 std::to_string(bytes));
      }
      use(segment.data);  // null when empty
      return nullptr;
    }
    if (!arrived_.wait_for(lock, std::chrono::milliseconds(liveness_period_ms),
                           [&] { return segments_.count(key) || !all_aborted_.empty() ||
                                        ring_aborted(key) != nullptr ||
                                        (or_channel && channels_.count(key.ring)); })) {
      lock.unlock();
      check_alive();
      lock.lock();
    }
  }
}

void RingMailbox::release_all(std::unique_lock<std::mutex>& lock) {
  std::vector<std::function<void()>> releases;
  for (auto& [key, segment] : segments_) {
    if (segment.release) releases.push_back(std::move(segment.release));
  }
  segments_.clear();
  auto channels = std::move(channels_);
  channels_.clear();
  lock.unlock();
  for (auto& [ring, channel] : channels) channel->shutdown();
  for (auto& release : releases) release();
}

const std::string* RingMailbox::ring_aborted(const Key& key) const {
  auto a = aborted_.find(key.ring);
  if (a == aborted_.end() || a->second.epoch < membership::decode_round_tag(key.round).epoch) return nullptr;
  return &a->second.reason;
}

void RingMailbox::abort(uint32_t ring, const std::string& reason, uint64_t epoch) {
  std::vector<std::function<void()>> releases;
  std::shared_ptr<wire::DataChannel> channel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [a, fresh] = aborted_.emplace(ring, Aborted{reason, epoch});
    if (!fresh && a->second.epoch < epoch) a->second = Aborted{reason, epoch};
    // The ring's channel carried the aborted reduces: shut down, so that a reader blocked on it
    // fails at once. Not for an abort of one membership epoch (setRings), which may arrive late,
    // after the channel of a newer membership came: its readers see it within their idle check.
    auto c = channels_.find(ring);
    if (c != channels_.end() && epoch == membership::kEveryEpoch) {
      channel = std::move(c->second);
      channels_.erase(c);
    }
    for (auto it = segments_.begin(); it != segments_.end();) {
      if (it->first.ring != ring || membership::decode_round_tag(it->first.round).epoch > epoch) {
        ++it;
        continue;
      }
      if (it->second.release) releases.push_back(std::move(it->second.release));
      it = segments_.erase(it);
    }
  }
  if (channel != nullptr) channel->shutdown();
  arrived_.notify_all();
  for (auto& release : releases) release();
}

void RingMailbox::abort_all(const std::string& reason) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (all_aborted_.empty()) all_aborted_ = reason;
  arrived_.notify_all();
  release_all(lock);
}

void RingMailbox::reset() {
  std::unique_lock<std::mutex> lock(mutex_);
  aborted_.clear();
  all_aborted_.clear();
  release_all(lock);
}

}  // namespace ravnest::daemon
