#include "libs/wire/guarded_stream.h"

#include <algorithm>
#include <cstring>

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <kj/debug.h>

#include "libs/wire/kj_reason.h"

namespace ravnest::wire {

namespace {

constexpr uint64_t kMaxSegments = 512;  // capnp refuses more itself; bounds the header here
constexpr size_t kKindWords = 16;       // root pointer, Message, Call: 7 words as capnp lays them

uint64_t little_endian_u32(const kj::byte* p) {
  return uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
}

std::string seconds_text(kj::Duration d) {
  const double s = static_cast<double>(d / kj::MILLISECONDS) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof(text), "%g", s);
  return text;
}

}  // namespace

RpcMessageKind rpc_message_kind(const kj::byte* bytes, size_t word_count) {
  RpcMessageKind kind;
  word_count = std::min(word_count, kKindWords);
  if (word_count == 0) return kind;
  capnp::word words[kKindWords];
  std::memcpy(words, bytes, word_count * sizeof(capnp::word));
  kj::ArrayPtr<const capnp::word> segments[1] = {kj::arrayPtr(words, word_count)};
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kKindWords;
  options.nestingLimit = 4;
  capnp::SegmentArrayMessageReader reader(kj::arrayPtr(segments, 1), options);
  // A pointer reaching past these words (a layout capnp's own builder does not make) reads as an
  // error or as a default: the message is then of no listed kind.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                auto message = reader.getRoot<capnp::rpc::Message>();
                if (message.which() != capnp::rpc::Message::CALL || !message.hasCall()) return;
                auto call = message.getCall();
                kind.interface_id = call.getInterfaceId();
                kind.method_id = call.getMethodId();
                kind.call = true;
              })) {
    (void)e;
    return RpcMessageKind{};
  }
  return kind;
}

GuardedStream::GuardedStream(kj::Own<kj::AsyncIoStream> inner,
                             std::shared_ptr<ConnectionTrust> trust, MessageLimits limits,
                             std::function<void(const std::string&)> on_refused, kj::Timer* timer,
                             ConnectionTimeouts timeouts)
    : ForwardingStream(kj::mv(inner)),
      trust_(std::move(trust)),
      limits_(std::move(limits)),
      on_refused_(std::move(on_refused)),
      timer_(timer),
      timeouts_(timeouts),
      message_start_(kj::origin<kj::TimePoint>()),
      last_activity_(kj::origin<kj::TimePoint>()) {
  smallest_limit_ = limits_.other_message_bytes;
  for (const auto& [key, limit] : limits_.calls) {
    smallest_limit_ = std::min(smallest_limit_, limit.bytes);
  }
  if (timer_) last_activity_ = timer_->now();
}

kj::Promise<size_t> GuardedStream::refuse(const std::string& why) {
  if (!refused_ && on_refused_) on_refused_(why);
  refused_ = true;
  trust_->refusal_reported = true;
  return kj_failure("refused: " + why);
}

kj::Promise<void> GuardedStream::write(const void* buffer, size_t size) {
  if (timer_) last_activity_ = timer_->now();
  return inner_->write(buffer, size);
}

kj::Promise<void> GuardedStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  if (timer_) last_activity_ = timer_->now();
  return inner_->write(pieces);
}

std::pair<kj::TimePoint, std::string> GuardedStream::deadline() const {
  const kj::TimePoint never = kj::maxValue;
  if (in_message_ && timeouts_.message_grace > 0 * kj::SECONDS) {
    const double transfer_s = static_cast<double>(message_size_) /
                              static_cast<double>(std::max<uint64_t>(timeouts_.min_bytes_per_second, 1));
    const kj::Duration allowed =
        timeouts_.message_grace + static_cast<int64_t>(transfer_s * 1e9) * kj::NANOSECONDS;
    std::string why = message_size_ > 0
                          ? "a message of " + std::to_string(message_size_) +
                                " bytes not received within " + seconds_text(allowed) + " s"
                          : "a message header not received within " + seconds_text(allowed) + " s";
    return {message_start_ + allowed, why};
  }
  if (!in_message_ && trust_->opened && timeouts_.idle > 0 * kj::SECONDS) {
    return {last_activity_ + timeouts_.idle,
            "nothing read or written for " + seconds_text(timeouts_.idle) + " s"};
  }
  return {never, ""};
}

kj::Promise<void> GuardedStream::expiry() {
  const kj::TimePoint never = kj::maxValue;
  const auto at = deadline().first;
  if (at == never) return kj::NEVER_DONE;
  return timer_->atTime(at).then([this]() -> kj::Promise<void> {
    // Something was written meanwhile (the idle time moved), or the message's size became known.
    if (timer_->now() < deadline().first) return expiry();
    return kj::READY_NOW;
  });
}

kj::Promise<size_t> GuardedStream::timed(kj::Promise<size_t> read) {
  if (!timer_) return read;
  return read.exclusiveJoin(
      expiry().then([this]() -> kj::Promise<size_t> { return refuse(deadline().second); }));
}

kj::Promise<size_t> GuardedStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  if (refused_) return KJ_EXCEPTION(FAILED, "refused: the connection broke its limits");
  if (ahead_at_ < ahead_.size()) {
    // The start of a body read ahead to decide its limit: already followed as far as its kind.
    const size_t n = std::min(max_bytes, ahead_.size() - ahead_at_);
    std::memcpy(buffer, ahead_.data() + ahead_at_, n);
    ahead_at_ += n;
    if (ahead_at_ == ahead_.size()) {
      ahead_.clear();
      ahead_at_ = 0;
    }
    const auto followed = follow(static_cast<const kj::byte*>(buffer), n);
    if (!followed.refusal.empty()) return refuse(followed.refusal);
    KJ_ASSERT(!followed.needs_kind, "read ahead past a body");
    if (n >= min_bytes) return n;
    return tryRead(static_cast<kj::byte*>(buffer) + n, min_bytes - n, max_bytes - n)
        .then([n](size_t more) { return n + more; });
  }
  if (!trust_->opened) {
    const uint64_t left = limits_.total_bytes_before_open - read_before_open_;
    if (min_bytes > left) {
      return refuse("more than " + std::to_string(limits_.total_bytes_before_open) +
                    " bytes before authentication");
    }
    if (max_bytes > left) max_bytes = left;
  }
  return timed(inner_->tryRead(buffer, min_bytes, max_bytes))
      .then([this, buffer](size_t n) -> kj::Promise<size_t> {
        if (timer_ && n > 0) last_activity_ = timer_->now();
        if (!trust_->opened) {
          read_before_open_ += n;
          trust_->read_before_open = read_before_open_;
        }
        const auto* bytes = static_cast<const kj::byte*>(buffer);
        const auto followed = follow(bytes, n);
        if (!followed.refusal.empty()) return refuse(followed.refusal);
        if (followed.needs_kind) return classify(bytes, n, followed.at);
        return n;
      });
}

kj::Promise<size_t> GuardedStream::classify(const kj::byte* bytes, size_t size, size_t at) {
  const size_t need = std::min<uint64_t>(first_segment_words_, kKindWords) * 8;
  const size_t have = std::min(size - at, need);
  auto decide = [this, bytes, size, at](const std::vector<kj::byte>& start) -> kj::Promise<size_t> {
    const auto kind = rpc_message_kind(start.data(), start.size() / 8);
    const std::string why = check_size(message_size_, &kind);
    if (!why.empty()) return refuse(why);
    const auto rest = follow(bytes + at, size - at);  // the body's bytes handed over now
    if (!rest.refusal.empty()) return refuse(rest.refusal);
    if (rest.needs_kind) return classify(bytes + at, size - at, rest.at);
    return size;
  };
  std::vector<kj::byte> start(bytes + at, bytes + at + have);
  if (have == need) return decide(start);
  auto more = std::make_shared<std::vector<kj::byte>>(need - have);
  return timed(inner_->tryRead(more->data(), more->size(), more->size()))
      .then([this, more, start = std::move(start), decide](size_t n) mutable -> kj::Promise<size_t> {
        if (timer_ && n > 0) last_activity_ = timer_->now();
        more->resize(n);
        start.insert(start.end(), more->begin(), more->end());
        start.resize(start.size() / 8 * 8);
        // Handed over after the bytes of this read, and followed then.
        ahead_ = std::move(*more);
        ahead_at_ = 0;
        return decide(start);
      });
}

std::string GuardedStream::check_size(uint64_t message, const RpcMessageKind* kind) {
  const bool open = trust_->opened;
  uint64_t limit = open ? limits_.message_bytes : limits_.message_bytes_before_open;
  std::string what = open ? "" : " before authentication";
  std::string kind_name;
  if (open && !limits_.calls.empty()) {
    limit = limits_.other_message_bytes;
    if (kind != nullptr && kind->call) {
      const auto it = limits_.calls.find({kind->interface_id, kind->method_id});
      if (it != limits_.calls.end()) {
        limit = it->second.bytes;
        kind_name = it->second.name + " ";
      }
    }
  }
  if (message <= limit) return {};
  return "a " + kind_name + "message of " + std::to_string(message) + " bytes" + what +
         " (the limit is " +
         std::to_string(limit) + ")";
}

GuardedStream::Followed GuardedStream::follow(const kj::byte* bytes, size_t size) {
  size_t at = 0;
  while (at < size) {
    if (body_left_ > 0) {
      const uint64_t skip = std::min<uint64_t>(body_left_, size - at);
      body_left_ -= skip;
      at += skip;
      if (body_left_ == 0) in_message_ = false;
      continue;
    }
    if (header_.empty()) {
      in_message_ = true;
      message_size_ = 0;
      if (timer_) message_start_ = timer_->now();
    }
    header_.push_back(bytes[at++]);
    if (header_bytes_ == 0 && header_.size() == 4) {
      // The first word: segment count minus one, then the first segment's size; the sizes of
      // the others follow, padded to a whole word.
      const uint64_t segments = little_endian_u32(header_.data()) + 1;
      if (segments > kMaxSegments) return {"a message of more than 512 segments", false, at};
      header_bytes_ = (4 + 4 * segments + 7) & ~uint64_t{7};
    }
    if (header_bytes_ != 0 && header_.size() == header_bytes_) {
      const uint64_t segments = little_endian_u32(header_.data()) + 1;
      uint64_t words = 0;
      for (uint64_t s = 0; s < segments; ++s) words += little_endian_u32(&header_[4 + 4 * s]);
      first_segment_words_ = little_endian_u32(&header_[4]);
      message_size_ = header_bytes_ + words * 8;
      body_left_ = words * 8;
      header_.clear();
      header_bytes_ = 0;
      if (body_left_ == 0) in_message_ = false;
      const bool by_kind = trust_->opened && !limits_.calls.empty() &&
                           message_size_ > smallest_limit_ && first_segment_words_ > 0;
      if (by_kind) return {"", true, at};
      const std::string why = check_size(message_size_, nullptr);
      if (!why.empty()) return {why, false, at};
    }
  }
  return {};
}

}  // namespace ravnest::wire
