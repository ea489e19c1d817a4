#include "libs/wire/data_channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "libs/base/address.h"

namespace ravnest::wire {
namespace {

constexpr size_t kTagBytes = 16;
// round, step, segment, bytes, kind, 4 zero bytes, the frame's key (kind 1) or zeros; little-endian
constexpr size_t kHeaderBytes = 64;
constexpr uint32_t kKindLinkKey = 0;   // records under the channel's key (or plain)
constexpr uint32_t kKindFrameKey = 1;  // records under the key in the header: relayable
// Nonces' first four bytes: which sequence they count.
constexpr uint32_t kFrameRecords = 0;
constexpr uint32_t kAcknowledgments = 1;
constexpr uint32_t kFrameKeyRecords = 2;

std::runtime_error channel_error(const std::string& peer, const std::string& what) {
  return std::runtime_error("data channel with " + peer + ": " + what);
}

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void encode_header(const ChannelFrame& f, uint32_t kind, const std::string& key, uint8_t* out) {
  std::memset(out, 0, kHeaderBytes);
  put_u64(out, f.round);
  put_u32(out + 8, f.step);
  put_u32(out + 12, f.segment);
  put_u64(out + 16, f.bytes);
  put_u32(out + 24, kind);
  std::memcpy(out + 32, key.data(), std::min(key.size(), kChannelKeyBytes));
}

ChannelFrame decode_header(const uint8_t* in) {
  return {get_u64(in), get_u32(in + 8), get_u32(in + 12), get_u64(in + 16)};
}

size_t records_of(uint64_t bytes) {
  return static_cast<size_t>((bytes + kChannelRecordBytes - 1) / kChannelRecordBytes);
}

void counted_nonce(uint8_t nonce[12], uint32_t sequence, uint64_t count) {
  put_u32(nonce, sequence);
  put_u64(nonce + 4, count);
}

EVP_CIPHER_CTX* new_cipher(const std::string& key) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return nullptr;
  // The key once; each record sets its own nonce (EVP_CipherInit_ex with only the IV).
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), nullptr, k, nullptr, -1) != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

using Clock = std::chrono::steady_clock;

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw std::runtime_error("no random bytes from OpenSSL");
  }
  return out;
}

std::string ChannelFrame::to_string() const {
  return "round " + std::to_string(round) + " step " + std::to_string(step) + " segment " +
         std::to_string(segment) + " (" + std::to_string(bytes) + " bytes)";
}

DataChannel::DataChannel(int fd, const std::string& key, std::string peer, int poll_ms)
    : fd_(fd), peer_(std::move(peer)), poll_ms_(poll_ms) {
  // Blocking: every wait goes through poll() first, so that `idle` runs while nothing moves.
  const int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  if (!key.empty()) {
    if (key.size() != kChannelKeyBytes) {
      ::close(fd_);
      throw channel_error(peer_, "a key of " + std::to_string(key.size()) + " bytes");
    }
    cipher_ = new_cipher(key);
    frame_cipher_ = new_cipher(key);  // its key is replaced by each relayable frame's
    if (cipher_ == nullptr || frame_cipher_ == nullptr) {
      if (cipher_ != nullptr) EVP_CIPHER_CTX_free(cipher_);
      if (frame_cipher_ != nullptr) EVP_CIPHER_CTX_free(frame_cipher_);
      ::close(fd_);
      throw channel_error(peer_, "cannot set up AES-256-GCM");
    }
  }
  scratch_.resize(kChannelBatchRecords * (kChannelRecordBytes + kTagBytes));
}

DataChannel::~DataChannel() {
  if (cipher_ != nullptr) EVP_CIPHER_CTX_free(cipher_);
  if (frame_cipher_ != nullptr) EVP_CIPHER_CTX_free(frame_cipher_);
  ::close(fd_);
}

std::unique_ptr<DataChannel> DataChannel::connect(const std::string& address,
                                                  const std::string& token,
                                                  const std::string& key, int timeout_ms) {
  if (token.size() != kChannelTokenBytes) {
    throw channel_error(address, "a token of " + std::to_string(token.size()) + " bytes");
  }
  const auto parsed = base::Address::parse(address, "data channel");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(parsed.port());
  const int rc = getaddrinfo(parsed.host().c_str(), port.c_str(), &hints, &list);
  if (rc != 0) throw channel_error(address, std::string("cannot resolve: ") + gai_strerror(rc));
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           ai->ai_protocol);
    if (s < 0) {
      last_error = errno_text("socket");
      continue;
    }
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = errno_text("connect");
      ::close(s);
      continue;
    }
    pollfd p{s, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof(error);
    if (::poll(&p, 1, timeout_ms) != 1 ||
        getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      last_error = error != 0 ? std::string("connect: ") + std::strerror(error)
                              : "connect: no answer in " + std::to_string(timeout_ms) + " ms";
      ::close(s);
      continue;
    }
    fd = s;
  }
  freeaddrinfo(list);
  if (fd < 0) throw channel_error(address, last_error);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto channel = std::make_unique<DataChannel>(fd, key, address);
  std::string preface(kChannelPreface, sizeof(kChannelPreface));
  preface += token;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  channel->write_all(preface.data(), preface.size(), [&]() {
    if (Clock::now() > deadline) throw channel_error(address, "the preface was not taken in time");
  });
  return channel;
}

void DataChannel::shutdown() {
  shut_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

void DataChannel::write_all(const void* data, size_t bytes, const Idle& idle) {
  const auto* p = static_cast<const uint8_t*>(data);
  auto progress = Clock::now();
  while (bytes > 0) {
    if (shut_) throw channel_error(peer_, "closed");
    // Try first: with room in the socket (the usual case) this saves a poll per write.
    const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      progress = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      throw channel_error(peer_, errno_text("send"));
    }
    pollfd pfd{fd_, POLLOUT, 0};
    const int ready = ::poll(&pfd, 1, poll_ms_);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw channel_error(peer_, errno_text("poll"));
    }
    if (ready == 0) {
      idle();
      if (std::chrono::duration<double>(Clock::now() - progress).count() > stall_seconds) {
        throw channel_error(peer_, "nothing taken for " +
                                       std::to_string(static_cast<int>(stall_seconds)) + " s");
      }
    }
  }
}

void DataChannel::read_all(void* data, size_t bytes, const Idle& idle) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    if (shut_) throw channel_error(peer_, "closed");
    // Try first: with data waiting (the usual case at speed) this saves a poll per read.
    ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw channel_error(peer_, "closed by the peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw channel_error(peer_, errno_text("recv"));
    // Woken once what is still wanted (up to a batch) is there, not at every packet: TCP honours
    // SO_RCVLOWAT in poll; other sockets may ignore it. At most a quarter of the receive buffer:
    // a low-water mark the buffer cannot hold twice makes Linux grow the buffer and clamp TCP's
    // window to the mark (tcp_set_rcvlowat), which would cap a long link's throughput.
    const size_t wanted = std::min(bytes, kChannelBatchRecords * kChannelRecordBytes);
    if (wanted != wanted_) {
      wanted_ = wanted;
      int buffer = 0;
      socklen_t length = sizeof(buffer);
      if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buffer, &length) != 0) buffer = 0;
      const int lowat = std::max(1, static_cast<int>(std::min<size_t>(wanted, buffer / 4)));
      if (lowat != lowat_) {
        setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
        lowat_ = lowat;
      }
    }
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, poll_ms_);
    if (ready < 0 && errno != EINTR) throw channel_error(peer_, errno_text("poll"));
    if (ready == 0) idle();
  }
}

void DataChannel::seal_with(EVP_CIPHER_CTX* ctx, const uint8_t nonce[12], const void* plain,
                            size_t bytes, uint8_t* out) {
  int n = 0, last = 0;
  if (EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, nonce, 1) != 1 ||
      EVP_CipherUpdate(ctx, out, &n, static_cast<const uint8_t*>(plain),
                       static_cast<int>(bytes)) != 1 ||
      EVP_CipherFinal_ex(ctx, out + n, &last) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, out + bytes) != 1) {
    throw channel_error(peer_, "cannot seal a record");
  }
}

void DataChannel::open_with(EVP_CIPHER_CTX* ctx, const uint8_t nonce[12], const uint8_t* sealed,
                            size_t bytes, void* out) {
  uint8_t tag[kTagBytes];
  std::memcpy(tag, sealed + bytes, kTagBytes);  // `out` may overwrite `sealed`
  int n = 0, last = 0;
  auto* o = static_cast<uint8_t*>(out);
  if (EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, nonce, 0) != 1 ||
      EVP_CipherUpdate(ctx, o, &n, sealed, static_cast<int>(bytes)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) != 1 ||
      EVP_CipherFinal_ex(ctx, o + n, &last) != 1) {
    throw channel_error(peer_, "a record failed authentication (not from the peer, or damaged)");
  }
}

void DataChannel::seal(const void* plain, size_t bytes, uint8_t* out, uint32_t sequence) {
  uint8_t nonce[12];
  counted_nonce(nonce, sequence, sequence == kFrameRecords ? records_++ : acks_++);
  seal_with(cipher_, nonce, plain, bytes, out);
}

void DataChannel::open(const uint8_t* sealed, size_t bytes, void* out, uint32_t sequence) {
  uint8_t nonce[12];
  counted_nonce(nonce, sequence, sequence == kFrameRecords ? records_++ : acks_++);
  open_with(cipher_, nonce, sealed, bytes, out);
}

void DataChannel::seal_record(uint32_t kind, uint64_t index, const void* plain, size_t bytes,
                              uint8_t* out) {
  if (kind == kKindLinkKey) {
    seal(plain, bytes, out);
    return;
  }
  uint8_t nonce[12];
  counted_nonce(nonce, kFrameKeyRecords, index);
  seal_with(frame_cipher_, nonce, plain, bytes, out);
}

void DataChannel::open_record(uint32_t kind, uint64_t index, uint8_t* sealed, size_t bytes,
                              void* out) {
  if (kind == kKindLinkKey) {
    open(sealed, bytes, out);
    return;
  }
  uint8_t nonce[12];
  counted_nonce(nonce, kFrameKeyRecords, index);
  open_with(frame_cipher_, nonce, sealed, bytes, out);
}

void DataChannel::set_frame_key(const void* key) {
  const auto* k = static_cast<const unsigned char*>(key);
  if (EVP_CipherInit_ex(frame_cipher_, nullptr, nullptr, k, nullptr, -1) != 1) {
    throw channel_error(peer_, "cannot set a frame's key");
  }
}

void DataChannel::send_acknowledgment(const Idle& idle) {
  ++frames_received_;
  uint8_t ack[8 + kTagBytes];
  put_u64(ack, frames_received_);
  if (cipher_ == nullptr) {
    write_all(ack, 8, idle);
    return;
  }
  uint8_t sealed[8 + kTagBytes];
  seal(ack, 8, sealed, kAcknowledgments);
  write_all(sealed, sizeof(sealed), idle);
}

void DataChannel::wait_acknowledged(const Idle& idle) {
  auto progress = Clock::now();
  const Idle bounded = [&]() {
    idle();
    if (std::chrono::duration<double>(Clock::now() - progress).count() > stall_seconds) {
      throw channel_error(peer_, "no acknowledgment for " +
                                     std::to_string(static_cast<int>(stall_seconds)) + " s");
    }
  };
  while (frames_acknowledged_ < frames_sent_) {
    uint8_t ack[8 + kTagBytes];
    if (cipher_ == nullptr) {
      read_all(ack, 8, bounded);
    } else {
      read_all(ack, sizeof(ack), bounded);
      open(ack, 8, ack, kAcknowledgments);
    }
    const uint64_t count = get_u64(ack);
    if (count != frames_acknowledged_ + 1 || count > frames_sent_) {
      throw channel_error(peer_, "acknowledged frame " + std::to_string(count) + ", expected " +
                                     std::to_string(frames_acknowledged_ + 1));
    }
    frames_acknowledged_ = count;
    progress = Clock::now();
  }
}

void DataChannel::send(const ChannelFrame& frame, const void* data, const Idle& idle,
                       bool relayable) {
  ++frames_sent_;
  const auto* p = static_cast<const uint8_t*>(data);
  if (cipher_ == nullptr) {
    uint8_t header[kHeaderBytes];
    encode_header(frame, kKindLinkKey, {}, header);
    write_all(header, kHeaderBytes, idle);
    write_all(p, frame.bytes, idle);
    return;
  }
  const uint32_t kind = relayable ? kKindFrameKey : kKindLinkKey;
  std::string key;
  if (relayable) {
    // A key of the frame's own, which travels in the header sealed under the channel's key:
    // the records can then go on as they are, each nonce their place in this frame alone.
    key = random_bytes(kChannelKeyBytes);
    set_frame_key(key.data());
  }
  // Sealed records gathered kChannelBatchRecords at a time (the header with the first), one
  // send each: fewer system calls, and fewer wakeups of the receiver, than a send a record.
  uint8_t header[kHeaderBytes];
  encode_header(frame, kind, key, header);
  key.assign(key.size(), '\0');
  seal(header, kHeaderBytes, scratch_.data());
  size_t fill = kHeaderBytes + kTagBytes;
  uint64_t index = 0;
  for (uint64_t off = 0; off < frame.bytes; ++index) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChannelRecordBytes, frame.bytes - off));
    if (fill + n + kTagBytes > scratch_.size()) {
      write_all(scratch_.data(), fill, idle);
      fill = 0;
    }
    seal_record(kind, index, p + off, n, scratch_.data() + fill);
    fill += n + kTagBytes;
    off += n;
  }
  write_all(scratch_.data(), fill, idle);
}

void DataChannel::relay(const ChannelFrame& frame, const SealedFrame& kept, const Idle& idle) {
  if (cipher_ == nullptr || kept.key.size() != kChannelKeyBytes ||
      kept.records.size() != frame.bytes + records_of(frame.bytes) * kTagBytes) {
    throw std::logic_error("data channel with " + peer_ + ": nothing kept to relay as " +
                           frame.to_string());
  }
  ++frames_sent_;
  uint8_t header[kHeaderBytes];
  encode_header(frame, kKindFrameKey, kept.key, header);
  uint8_t sealed[kHeaderBytes + kTagBytes];
  seal(header, kHeaderBytes, sealed);
  std::memset(header, 0, sizeof(header));
  write_all(sealed, sizeof(sealed), idle);
  write_all(kept.records.data(), kept.records.size(), idle);
}

void DataChannel::read_sealed(uint8_t* into, uint64_t left, const Idle& idle) {
  const size_t batch = static_cast<size_t>(
      std::min<uint64_t>(left, kChannelBatchRecords * kChannelRecordBytes));
  read_all(into, batch + records_of(batch) * kTagBytes, idle);
}

uint32_t DataChannel::read_header(const ChannelFrame& expect, const Idle& idle,
                                  std::string* frame_key) {
  uint8_t header[kHeaderBytes + kTagBytes];
  if (cipher_ == nullptr) {
    read_all(header, kHeaderBytes, idle);
  } else {
    read_all(header, kHeaderBytes + kTagBytes, idle);
    open(header, kHeaderBytes, header);
  }
  const ChannelFrame got = decode_header(header);
  if (!(got == expect)) {
    throw channel_error(peer_, "expected " + expect.to_string() + ", got " + got.to_string());
  }
  const uint32_t kind = get_u32(header + 24);
  if (kind != kKindLinkKey && (kind != kKindFrameKey || cipher_ == nullptr)) {
    throw channel_error(peer_, "a frame of kind " + std::to_string(kind) + " (" +
                                   got.to_string() + ")");
  }
  if (kind == kKindFrameKey) {
    const auto* key = header + 32;
    if (frame_key != nullptr) frame_key->assign(reinterpret_cast<const char*>(key), kChannelKeyBytes);
    try {
      set_frame_key(key);
    } catch (...) {
      std::memset(header, 0, sizeof(header));
      throw;
    }
    std::memset(header, 0, sizeof(header));
  }
  return kind;
}

void DataChannel::open_records(uint32_t kind, uint64_t bytes, uint8_t* kept, uint8_t* out,
                               const PieceUse* use, const Idle& idle) {
  uint64_t index = 0;
  for (uint64_t off = 0; off < bytes;) {
    // Batches start on a record's boundary: the records before this one each carried a tag.
    uint8_t* sealed =
        kept != nullptr ? kept + off + (off / kChannelRecordBytes) * kTagBytes : scratch_.data();
    read_sealed(sealed, bytes - off, idle);
    const uint64_t end =
        std::min<uint64_t>(bytes, off + kChannelBatchRecords * kChannelRecordBytes);
    for (; off < end; ++index) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChannelRecordBytes, end - off));
      uint8_t* opened = out != nullptr ? out + off : sealed;
      open_record(kind, index, sealed, n, opened);
      if (use != nullptr) (*use)(static_cast<size_t>(off), opened, n);
      sealed += n + kTagBytes;
      off += n;
    }
  }
}

void DataChannel::recv(const ChannelFrame& expect, void* out, const Idle& idle,
                       SealedFrame* keep) {
  if (keep != nullptr) keep->key.clear();
  // A relayable frame's key lands in keep->key (the receiver wipes it once relayed).
  const uint32_t kind = read_header(expect, idle, keep != nullptr ? &keep->key : nullptr);
  auto* o = static_cast<uint8_t*>(out);
  if (cipher_ == nullptr) {
    read_all(o, expect.bytes, idle);  // straight into place
  } else if (keep != nullptr && kind == kKindFrameKey) {
    // Kept as it came, to go on unchanged; opened from there into place.
    keep->records.resize(static_cast<size_t>(expect.bytes) + records_of(expect.bytes) * kTagBytes);
    open_records(kind, expect.bytes, keep->records.data(), o, nullptr, idle);
  } else {
    open_records(kind, expect.bytes, nullptr, o, nullptr, idle);  // straight into place
  }
  send_acknowledgment(idle);
}

void DataChannel::recv_pieces(const ChannelFrame& expect, const PieceUse& use, const Idle& idle) {
  const uint32_t kind = read_header(expect, idle, nullptr);
  if (cipher_ != nullptr) {
    open_records(kind, expect.bytes, nullptr, nullptr, &use, idle);  // each opened in place
  } else {
    for (uint64_t off = 0; off < expect.bytes;) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(kChannelRecordBytes, expect.bytes - off));
      read_all(scratch_.data(), n, idle);
      use(static_cast<size_t>(off), scratch_.data(), n);
      off += n;
    }
  }
  send_acknowledgment(idle);
}

}  // namespace ravnest::wire
