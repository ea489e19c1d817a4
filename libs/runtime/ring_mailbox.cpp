#include "libs/runtime/ring_mailbox.h"

#include <chrono>
#include <cstring>
#include <stdexcept>

namespace ravnest::runtime {

void RingMailbox::deposit(const Key& key, std::string bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    segments_[key] = std::move(bytes);
  }
  arrived_.notify_all();
}

void RingMailbox::take(const Key& key, void* out, size_t bytes,
                       const std::function<void()>& check_alive, int liveness_period_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (!all_aborted_.empty()) throw std::runtime_error(all_aborted_);
    if (auto a = aborted_.find(key.ring); a != aborted_.end()) throw std::runtime_error(a->second);
    auto it = segments_.find(key);
    if (it != segments_.end()) {
      if (it->second.size() != bytes) {
        throw std::runtime_error("ring " + std::to_string(key.ring) + ": segment of " +
                                 std::to_string(it->second.size()) + " bytes, expected " +
                                 std::to_string(bytes));
      }
      std::memcpy(out, it->second.data(), bytes);
      segments_.erase(it);
      return;
    }
    if (!arrived_.wait_for(lock, std::chrono::milliseconds(liveness_period_ms),
                           [&] { return segments_.count(key) || !all_aborted_.empty() ||
                                        aborted_.count(key.ring); })) {
      lock.unlock();
      check_alive();
      lock.lock();
    }
  }
}

void RingMailbox::abort(uint32_t ring, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_.emplace(ring, reason);
  }
  arrived_.notify_all();
}

void RingMailbox::abort_all(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (all_aborted_.empty()) all_aborted_ = reason;
  }
  arrived_.notify_all();
}

void RingMailbox::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  segments_.clear();
  aborted_.clear();
  all_aborted_.clear();
}

}  // namespace ravnest::runtime
