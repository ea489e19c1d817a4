#include "libs/ring/ring_local.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <stdexcept>

namespace ravnest::ring {

namespace {
constexpr size_t kPoolLimit = 16;
}  // namespace

// Bytes and Message are named inside Link (not in an anonymous namespace) because Link has
// external linkage: a member of an internal type would make it differ between translation units.
struct LocalRing::Link {
  struct Bytes {
    std::unique_ptr<uint8_t[]> data;  // uninitialised on purpose: it is always overwritten
    size_t capacity = 0;
    size_t size = 0;
  };
  struct Message {
    RingTag tag;
    Bytes bytes;
  };

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Message> queue;
  size_t queued_bytes = 0;
  std::vector<Bytes> pool;  // spent buffers, reused to avoid an allocation per message
};

class LocalRing::Member final : public RingTransport {
  using Bytes = Link::Bytes;
  using Message = Link::Message;

 public:
  Member(LocalRing& ring, int position) : ring_(ring), position_(position) {}

  void send(const RingTag& tag, const void* data, size_t bytes) override {
    const int next = (position_ + 1) % ring_.size_;
    Link& link = *ring_.links_[static_cast<size_t>(position_)];
    if (ring_.aborted_) ring_.throw_aborted();

    Bytes buffer;
    {
      std::lock_guard<std::mutex> lock(link.mutex);
      auto it = std::find_if(link.pool.begin(), link.pool.end(),
                             [&](const Bytes& b) { return b.capacity >= bytes; });
      if (it != link.pool.end()) {
        buffer = std::move(*it);
        link.pool.erase(it);
      }
    }
    if (buffer.capacity < bytes) {
      buffer.data.reset(new uint8_t[std::max<size_t>(bytes, 1)]);
      buffer.capacity = bytes;
    }
    buffer.size = bytes;
    if (bytes) std::memcpy(buffer.data.get(), data, bytes);

    std::unique_lock<std::mutex> lock(link.mutex);
    const auto deadline = std::chrono::steady_clock::now() + ring_.options_.timeout;
    const bool ready = link.cv.wait_until(lock, deadline, [&] {
      return ring_.aborted_.load() || link.queued_bytes == 0 ||
             link.queued_bytes + bytes <= ring_.options_.capacity_bytes;
    });
    if (ring_.aborted_) {
      lock.unlock();
      ring_.throw_aborted();
    }
    if (!ready) {
      lock.unlock();
      ring_.fail(member_name(position_) + ": timed out after " +
                     std::to_string(ring_.options_.timeout.count()) + " ms sending to " +
                     member_name(next) + ", which is not receiving (" + tag.to_string() + ")",
                 member_name(next));
    }
    link.queued_bytes += bytes;
    link.queue.push_back({tag, std::move(buffer)});
    link.cv.notify_all();
  }

  void recv(const RingTag& tag, void* data, size_t bytes) override {
    const int prev = (position_ - 1 + ring_.size_) % ring_.size_;
    Link& link = *ring_.links_[static_cast<size_t>(prev)];
    auto& waiting = *ring_.waiting_[static_cast<size_t>(position_)];
    waiting = true;
    struct Clear {  // on a timeout the flag stays set: this member is blocked by its upstream
      std::atomic<bool>& flag;
      bool keep = false;
      ~Clear() { if (!keep) flag = false; }
    } clear{waiting};
    std::unique_lock<std::mutex> lock(link.mutex);
    const auto deadline = std::chrono::steady_clock::now() + ring_.options_.timeout;
    auto find = [&] {
      return std::find_if(link.queue.begin(), link.queue.end(),
                          [&](const Message& m) { return m.tag == tag; });
    };
    std::deque<Message>::iterator it;
    const bool ready = link.cv.wait_until(lock, deadline, [&] {
      if (ring_.aborted_.load()) return true;
      it = find();
      return it != link.queue.end();
    });
    if (ring_.aborted_) {
      lock.unlock();
      ring_.throw_aborted();
    }
    if (!ready) {
      lock.unlock();
      clear.keep = true;
      // Blame the first member upstream that is not itself blocked waiting for its own upstream:
      // that one is stuck or gone (the others time out only because of it).
      int culprit = prev;
      for (int hops = 0; hops < ring_.size_ - 1 && *ring_.waiting_[static_cast<size_t>(culprit)]; ++hops)
        culprit = (culprit - 1 + ring_.size_) % ring_.size_;
      std::string message = member_name(position_) + ": timed out after " +
                            std::to_string(ring_.options_.timeout.count()) + " ms waiting for " +
                            member_name(prev) + " (" + tag.to_string() + ")";
      if (culprit != prev)
        message += ", which is itself waiting upstream: " + member_name(culprit) + " is not sending";
      ring_.fail(message, member_name(culprit));
    }
    if (it->bytes.size != bytes) {
      const size_t got = it->bytes.size;
      lock.unlock();
      ring_.fail(member_name(position_) + ": message from " + member_name(prev) + " is " +
                     std::to_string(got) + " bytes, expected " + std::to_string(bytes) + " (" +
                     tag.to_string() + "): the members' tensors differ",
                 member_name(prev));
    }
    Bytes buffer = std::move(it->bytes);
    link.queue.erase(it);
    link.queued_bytes -= buffer.size;
    link.cv.notify_all();  // the sender may be waiting for room
    lock.unlock();

    if (bytes) std::memcpy(data, buffer.data.get(), bytes);

    lock.lock();
    if (link.pool.size() < kPoolLimit) link.pool.push_back(std::move(buffer));
  }

 private:
  LocalRing& ring_;
  const int position_;
};

LocalRing::LocalRing(int size, LocalRingOptions options) : size_(size), options_(options) {
  if (size < 1) throw std::invalid_argument("LocalRing: size must be >= 1");
  for (int i = 0; i < size; ++i) {
    links_.push_back(std::make_unique<Link>());
    waiting_.push_back(std::make_unique<std::atomic<bool>>(false));
    members_.push_back(std::make_unique<Member>(*this, i));
  }
}

LocalRing::~LocalRing() = default;

RingTransport& LocalRing::member(int i) {
  if (i < 0 || i >= size_) throw std::out_of_range("LocalRing: no member " + std::to_string(i));
  return *members_[static_cast<size_t>(i)];
}

void LocalRing::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = reason;
    aborted_ = true;
  }
  for (auto& link : links_) {
    std::lock_guard<std::mutex> lock(link->mutex);  // no waiter can miss the flag
    link->cv.notify_all();
  }
}

std::string LocalRing::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  return abort_reason_;
}

size_t LocalRing::pending_messages() const {
  size_t n = 0;
  for (const auto& link : links_) {
    std::lock_guard<std::mutex> lock(link->mutex);
    n += link->queue.size();
  }
  return n;
}

void LocalRing::fail(const std::string& message, const std::string& peer) {
  if (options_.abort_on_error) abort(message);
  throw RingError(message, peer);
}

void LocalRing::throw_aborted() const {
  throw RingError("ring aborted: " + abort_reason());
}

}  // namespace ravnest::ring
