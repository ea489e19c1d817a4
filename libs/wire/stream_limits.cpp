#include "libs/wire/stream_limits.h"

#include <stdexcept>

#include "libs/wire/kj_reason.h"

namespace ravnest::wire {

StreamSlot& StreamSlot::operator=(StreamSlot&& other) noexcept {
  if (this != &other) {
    release();
    counts_ = std::move(other.counts_);
    host_ = std::move(other.host_);
  }
  return *this;
}

StreamSlot::~StreamSlot() { release(); }

void StreamSlot::release() {
  if (!counts_) return;
  auto it = counts_->find(host_);
  if (it != counts_->end() && --it->second == 0) counts_->erase(it);
  counts_.reset();
}

void check_stream_size(uint64_t announced, uint64_t max_bytes, const std::string& what,
                       const std::string& key) {
  if (announced <= max_bytes) return;
  throw std::runtime_error(what + ": announces " + std::to_string(announced) +
                           " bytes, more than the limit of " + std::to_string(max_bytes) +
                           " (limits." + key + ")");
}

StreamSlot StreamLimits::open(const std::string& host, const std::string& what) {
  size_t& open = (*counts_)[host];
  if (per_peer_ > 0 && open >= per_peer_) {
    if (open == 0) counts_->erase(host);
    throw kj_failure("refused: more than " + std::to_string(per_peer_) + " open streams from " +
                     host + " (" + what + ")");
  }
  ++open;
  return StreamSlot(counts_, host);
}

size_t StreamLimits::open_streams(const std::string& host) const {
  auto it = counts_->find(host);
  return it == counts_->end() ? 0 : it->second;
}

}  // namespace ravnest::wire
