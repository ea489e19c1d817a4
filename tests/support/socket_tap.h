// SocketTap: loopback TCP relays that record every byte they pass, for tests that check what
// travels on the wire. Each relay listens on a free port of 127.0.0.1 and forwards every
// connection to its target port on 127.0.0.1, both ways, recording both directions. One thread
// runs all of them (poll); stopped and joined on destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ravnest::test {

class SocketTap {
 public:
  // One relay per target port; relay_port(i) forwards to targets[i].
  explicit SocketTap(const std::vector<int>& targets);
  ~SocketTap();
  SocketTap(const SocketTap&) = delete;
  SocketTap& operator=(const SocketTap&) = delete;

  int relay_port(size_t i) const { return relays_.at(i).port; }
  std::string captured() const;   // every byte relayed so far, in both directions
  size_t connections() const;     // accepted so far, over all relays

 private:
  struct Relay {
    int listen_fd = -1;
    int port = 0;
    int target = 0;
  };
  void run();

  std::vector<Relay> relays_;
  mutable std::mutex mutex_;
  std::string captured_;
  size_t connections_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ravnest::test
