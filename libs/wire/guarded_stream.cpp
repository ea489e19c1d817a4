#include "libs/wire/guarded_stream.h"

#include <algorithm>

#include <kj/debug.h>

#include "libs/wire/kj_reason.h"

namespace ravnest::wire {

namespace {

constexpr uint64_t kMaxSegments = 512;  // capnp refuses more itself; bounds the header here

uint64_t little_endian_u32(const kj::byte* p) {
  return uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
}

}  // namespace

GuardedStream::GuardedStream(kj::Own<kj::AsyncIoStream> inner,
                             std::shared_ptr<ConnectionTrust> trust, MessageLimits limits,
                             std::function<void(const std::string&)> on_refused)
    : inner_(kj::mv(inner)),
      trust_(std::move(trust)),
      limits_(limits),
      on_refused_(std::move(on_refused)) {}

kj::Promise<size_t> GuardedStream::refuse(const std::string& why) {
  if (!refused_ && on_refused_) on_refused_(why);
  refused_ = true;
  return kj_failure("refused: " + why);
}

kj::Promise<size_t> GuardedStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  if (refused_) return KJ_EXCEPTION(FAILED, "refused: the connection broke its limits");
  if (!trust_->opened) {
    const uint64_t left = limits_.total_bytes_before_open - read_before_open_;
    if (min_bytes > left) {
      return refuse("more than " + std::to_string(limits_.total_bytes_before_open) +
                    " bytes before authentication");
    }
    if (max_bytes > left) max_bytes = left;
  }
  return inner_->tryRead(buffer, min_bytes, max_bytes)
      .then([this, buffer](size_t n) -> kj::Promise<size_t> {
        if (!trust_->opened) read_before_open_ += n;
        const std::string why = follow(static_cast<const kj::byte*>(buffer), n);
        if (!why.empty()) return refuse(why);
        return n;
      });
}

std::string GuardedStream::follow(const kj::byte* bytes, size_t size) {
  size_t at = 0;
  while (at < size) {
    if (body_left_ > 0) {
      const uint64_t skip = std::min<uint64_t>(body_left_, size - at);
      body_left_ -= skip;
      at += skip;
      continue;
    }
    header_.push_back(bytes[at++]);
    if (header_bytes_ == 0 && header_.size() == 4) {
      // The first word: segment count minus one, then the first segment's size; the sizes of
      // the others follow, padded to a whole word.
      const uint64_t segments = little_endian_u32(header_.data()) + 1;
      if (segments > kMaxSegments) return "a message of more than 512 segments";
      header_bytes_ = (4 + 4 * segments + 7) & ~uint64_t{7};
    }
    if (header_bytes_ != 0 && header_.size() == header_bytes_) {
      const uint64_t segments = little_endian_u32(header_.data()) + 1;
      uint64_t words = 0;
      for (uint64_t s = 0; s < segments; ++s) words += little_endian_u32(&header_[4 + 4 * s]);
      const uint64_t message = header_bytes_ + words * 8;
      const bool open = trust_->opened;
      const uint64_t limit = open ? limits_.message_bytes : limits_.message_bytes_before_open;
      if (message > limit) {
        return "a message of " + std::to_string(message) + " bytes" +
               (open ? "" : " before authentication") + " (the limit is " +
               std::to_string(limit) + ")";
      }
      body_left_ = words * 8;
      header_.clear();
      header_bytes_ = 0;
    }
  }
  return {};
}

}  // namespace ravnest::wire
