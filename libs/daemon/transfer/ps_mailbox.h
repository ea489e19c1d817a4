// PsMailbox: where a parameter-server worker's RPC thread leaves the weights its servers send
// (psWeights), and where the worker's compute thread, blocked in exchange_with_servers, waits for
// them. abort() wakes the waiter with a reason (a server failed, the job was stopped).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "libs/wire/transfer_message.h"

namespace ravnest::daemon {

class PsMailbox {
 public:
  // Any thread. Weights for an update already taken are dropped.
  void deposit(wire::TransferMessage weights);
  // Waits for the weights answering update `step` from each of `servers` (node ids); returns them
  // in that order. Throws std::runtime_error on abort.
  std::vector<wire::TransferMessage> take(uint64_t step, const std::vector<int>& servers);
  void abort(const std::string& reason);
  void reset();  // a new job

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<uint64_t, std::map<int, wire::TransferMessage>> waiting_;  // step -> server -> weights
  uint64_t taken_below_ = 0;  // steps before this one were taken
  std::string aborted_;
};

}  // namespace ravnest::daemon
