// An in-process ring: N connected RingTransports backed by bounded queues (one per link
// i -> i+1), for tests and for benchmarking the all-reduce algorithm without a network.
//
//  - send() copies the bytes into the link's queue and returns; it blocks while the link holds
//    `capacity_bytes` or more (a link always accepts one message when empty).
//  - recv() takes the message with the tag from the link (any position in the queue; the
//    all-reduce sends in the order it receives, so it is normally the front).
//  - Any failure a member sees — a recv or send that waits longer than `timeout`, a message of
//    the wrong size — aborts the whole ring (unless abort_on_error is off), so every member
//    blocked in the ring gets a RingError naming the member the failure is about. A receive
//    timeout blames the first member upstream that is not itself blocked receiving (the one
//    that is gone or stuck), whichever member's timer fires first.
//  - abort(reason) makes every blocked and every later call throw RingError(reason).
// Members are named "member <i>" in errors.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "libs/ring/ring_transport.h"

namespace ravnest::ring {

struct LocalRingOptions {
  std::chrono::milliseconds timeout{30000};  // per blocking send/recv
  size_t capacity_bytes = 8u << 20;          // per link
  bool abort_on_error = true;                // a member's failure aborts the ring for all
};

class LocalRing {
 public:
  explicit LocalRing(int size, LocalRingOptions options = {});
  ~LocalRing();
  LocalRing(const LocalRing&) = delete;
  LocalRing& operator=(const LocalRing&) = delete;

  int size() const { return size_; }
  // Member i's transport: sends to member (i+1) % size, receives from member (i-1+size) % size.
  RingTransport& member(int i);
  // Makes every blocked and later send/recv throw RingError(reason). The first reason wins.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }
  std::string abort_reason() const;
  // Messages queued on every link (0 after a clean round).
  size_t pending_messages() const;

  static std::string member_name(int i) { return "member " + std::to_string(i); }

 private:
  struct Link;
  class Member;
  friend class Member;

  [[noreturn]] void fail(const std::string& message, const std::string& peer);
  [[noreturn]] void throw_aborted() const;

  const int size_;
  const LocalRingOptions options_;
  std::vector<std::unique_ptr<Link>> links_;  // links_[i]: member i -> member i+1
  std::vector<std::unique_ptr<Member>> members_;
  std::vector<std::unique_ptr<std::atomic<bool>>> waiting_;  // member i is blocked in recv
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace ravnest::ring
