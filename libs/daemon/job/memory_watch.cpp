#include "libs/daemon/job/memory_watch.h"

#include "libs/config/daemon/memory_checks.h"
#include "libs/base/process_memory.h"

namespace ravnest::daemon {

int64_t MemoryWatch::measure_baseline() {
  baseline_bytes_ = base::read_process_memory().resident_bytes;
  return baseline_bytes_;
}

void MemoryWatch::watch(std::string node, std::function<bool()> running,
                        std::function<void(const std::string&)> warn) {
  stop();
  node_ = std::move(node);
  running_ = std::move(running);
  warn_ = std::move(warn);
  armed_ = true;
  tasks_.add(canceler_.wrap(tick()).catch_([](kj::Exception&&) {}));
}

// A look now (a job that starts above the line says so at once), then one every interval.
kj::Promise<void> MemoryWatch::tick() {
  if (!running_()) return kj::READY_NOW;
  const config::MemoryReading now = read();
  const auto step = config::step_memory_alarm(now.use.used_bytes, now.budget.bytes, armed_);
  armed_ = step.armed;
  if (step.warn) warn_(config::memory_warning_message(node_, now.use.used_bytes, now.budget));
  const auto interval = static_cast<uint64_t>(kIntervalSeconds * 1000) * kj::MILLISECONDS;
  return rpc_.timer().afterDelay(interval).then([this]() { return tick(); });
}

}  // namespace ravnest::daemon
