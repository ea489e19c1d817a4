#include "libs/daemon/transfer/ps_mailbox.h"

#include <stdexcept>

namespace ravnest::daemon {

void PsMailbox::deposit(wire::TransferMessage weights) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t step = weights.batch.step;
    if (step < taken_below_) return;
    waiting_[step][weights.from_node] = std::move(weights);
  }
  arrived_.notify_all();
}

std::vector<wire::TransferMessage> PsMailbox::take(uint64_t step, const std::vector<int>& servers) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto complete = [&] {
    auto it = waiting_.find(step);
    if (it == waiting_.end()) return false;
    for (int s : servers) {
      if (!it->second.count(s)) return false;
    }
    return true;
  };
  arrived_.wait(lock, [&] { return !aborted_.empty() || complete(); });
  if (!aborted_.empty()) throw std::runtime_error(aborted_);
  std::vector<wire::TransferMessage> out;
  auto& from = waiting_[step];
  for (int s : servers) out.push_back(std::move(from[s]));
  waiting_.erase(waiting_.begin(), waiting_.upper_bound(step));
  taken_below_ = step + 1;
  return out;
}

void PsMailbox::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
  }
  arrived_.notify_all();
}

void PsMailbox::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_.clear();
  taken_below_ = 0;
  aborted_.clear();
}

}  // namespace ravnest::daemon
