// MemoryWatch: the daemon's memory budget (config/memory_budget.h) as JobControl uses it: the
// budget and use now (for status and the check at push), the idle daemon's baseline, measured
// once when it starts serving, and, while a job runs, a look at used bytes when it starts and
// every kIntervalSeconds, which warns once at 90 % of the budget (config/memory_checks.h decides;
// it re-arms below 80 %, and for every job). docs/daemon.md#memory.
//
// The budget is read again at every use: a cgroup's limit may change while the daemon runs
// (systemctl set-property). RPC thread only: status, pushStage and the ticks all run there.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <kj/async.h>

#include "libs/config/daemon/memory_budget.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/rpc_thread.h"

namespace ravnest::daemon {

class MemoryWatch {
 public:
  static constexpr double kIntervalSeconds = 0.5;

  // `memory_limit`: the config's (0: none).
  MemoryWatch(int64_t memory_limit, RpcThread& rpc) : memory_limit_(memory_limit), rpc_(rpc) {}

  // This process's resident bytes now become its baseline; returns them. Once, when the daemon
  // listens: what an idle daemon holds (LibTorch loaded, nothing computed).
  int64_t measure_baseline();
  int64_t baseline_bytes() const { return baseline_bytes_; }

  // The budget and use now.
  config::MemoryReading read() const { return config::read_memory(memory_limit_); }

  // While `running()`, warns through `warn(message)` as step_memory_alarm says; replaces what
  // was watched, re-armed. `node` names the daemon in the message.
  void watch(std::string node, std::function<bool()> running,
             std::function<void(const std::string&)> warn);
  void stop() { canceler_.cancel("no longer watched"); }

 private:
  kj::Promise<void> tick();

  const int64_t memory_limit_;
  RpcThread& rpc_;
  int64_t baseline_bytes_ = 0;
  std::string node_;
  std::function<bool()> running_;
  std::function<void(const std::string&)> warn_;
  bool armed_ = true;
  kj::Canceler canceler_;
  BackgroundTasks tasks_;  // last: dropped before the canceler and what the tasks use
};

}  // namespace ravnest::daemon
