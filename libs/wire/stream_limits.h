// StreamLimits: how many streams each peer host may hold open on this process at once. A stream
// is a sink a peer writes into (a dataset file, a checkpoint, a micro-batch's tensors, a ring's
// segments); each holds memory or a file until it is done or released, so a peer (all of one
// host's connections together) may hold no more than the limit. A StreamSlot counts one until it
// is destroyed.
//
// Single-threaded: the RPC thread's. Slots may outlive the StreamLimits that gave them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace ravnest::wire {

class StreamSlot {
 public:
  StreamSlot() = default;
  StreamSlot(StreamSlot&& other) noexcept = default;
  StreamSlot& operator=(StreamSlot&& other) noexcept;
  ~StreamSlot();

 private:
  friend class StreamLimits;
  using Counts = std::map<std::string, size_t>;
  StreamSlot(std::shared_ptr<Counts> counts, std::string host)
      : counts_(std::move(counts)), host_(std::move(host)) {}
  void release();
  std::shared_ptr<Counts> counts_;
  std::string host_;
};

// Throws std::runtime_error "<what>: announces N bytes, more than the limit of M (limits.<key>)"
// for a stream announcing more than `max_bytes`.
void check_stream_size(uint64_t announced, uint64_t max_bytes, const std::string& what,
                       const std::string& key = "file_bytes");

class StreamLimits {
 public:
  explicit StreamLimits(size_t per_peer) : per_peer_(per_peer) {}
  // One more stream of `host` ("127.0.0.1"), for `what` ("pushFile"). At the limit: throws
  // kj::Exception FAILED "refused: more than N open streams from <host> (pushFile)". 0: no limit.
  StreamSlot open(const std::string& host, const std::string& what);
  size_t open_streams(const std::string& host) const;

 private:
  size_t per_peer_;
  std::shared_ptr<StreamSlot::Counts> counts_ = std::make_shared<StreamSlot::Counts>();
};

}  // namespace ravnest::wire
