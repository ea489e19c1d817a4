#include "libs/wire/rpc_connection.h"

#include <capnp/rpc-twoparty.h>
#include <kj/debug.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "libs/base/address.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/data_channel.h"
#include "libs/wire/protocol_mismatch.h"
#include "libs/wire/replay_stream.h"

namespace ravnest::wire {

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) ::freeaddrinfo(list);
  }
};

void resolve(const std::string& host, uint16_t port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.list);
  if (rc != 0) KJ_FAIL_REQUIRE("cannot resolve address", host, port, gai_strerror(rc));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// connect() on a blocking socket; after EINTR the connection proceeds asynchronously, so wait
// for it with poll() and read its outcome from SO_ERROR.
bool connect_blocking(int fd, const addrinfo* ai, int& error) {
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return true;
  if (errno != EINTR) {
    error = errno;
    return false;
  }
  pollfd p{fd, POLLOUT, 0};
  while (::poll(&p, 1, -1) < 0) {
    if (errno != EINTR) {
      error = errno;
      return false;
    }
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
    error = errno;
    return false;
  }
  error = so_error;
  return so_error == 0;
}

}  // namespace

capnp::ReaderOptions reader_options(uint64_t max_message_bytes) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = max_message_bytes / sizeof(capnp::word);
  options.nestingLimit = 64;
  return options;
}

void tune_socket(int fd, const SocketOptions& options) {
  if (options.no_delay) {
    int one = 1;
    KJ_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
  }
  if (options.send_buffer > 0) {
    KJ_SYSCALL(::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer,
                            sizeof(options.send_buffer)));
  }
  if (options.receive_buffer > 0) {
    KJ_SYSCALL(::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.receive_buffer,
                            sizeof(options.receive_buffer)));
  }
}

std::string peer_address(kj::AsyncIoStream& stream) {
  sockaddr_storage address{};
  kj::uint length = sizeof(address);
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&address), &length);
  } catch (const kj::Exception&) {
    return "unknown peer";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "unknown peer";
}

// The host of a peer_address(), which counts its connections; "unknown peer" stays itself.
std::string peer_host(const std::string& address) {
  const auto parsed = base::Address::try_parse(address, base::Address::PortRule::kZeroAllowed);
  return parsed ? parsed->host() : address;
}

// ---- server -------------------------------------------------------------------------------------

// One connection being served: its stream, network and RPC system, with the capability the
// factory made for it.
struct RpcServer::Served {
  Served(kj::Own<kj::AsyncIoStream> stream_in, const capnp::ReaderOptions& options,
         capnp::Capability::Client bootstrap)
      : stream(kj::mv(stream_in)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

namespace {

// A socket listening on host:port, tuned; returns the descriptor and sets `port`.
int listen_socket(const std::string& host, uint16_t requested, const SocketOptions& socket,
                  uint16_t& port) {
  AddrInfo info;
  resolve(host, requested, true, info);
  const addrinfo* ai = info.list;
  KJ_REQUIRE(ai != nullptr, "no address to listen on", host);
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (fd.get() < 0) {
    int error = errno;
    KJ_FAIL_SYSCALL("socket", error);
  }
  int one = 1;
  KJ_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  // Accepted sockets inherit these (TCP_NODELAY, buffer sizes) from the listener on Linux.
  tune_socket(fd.get(), socket);
  KJ_SYSCALL(::bind(fd.get(), ai->ai_addr, ai->ai_addrlen), host, requested);
  KJ_SYSCALL(::listen(fd.get(), SOMAXCONN));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  KJ_SYSCALL(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len));
  port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd.release();
}

RpcServer::Options ungated(const ConnectionOptions& connection) {
  RpcServer::Options options;
  options.connection = connection;
  options.connection.gated = false;
  return options;
}

std::string without_refused(const std::string& reason) {
  const std::string prefix = "refused: ";
  return reason.rfind(prefix, 0) == 0 ? reason.substr(prefix.size()) : reason;
}

}  // namespace

RpcServer::RpcServer(Bootstrap bootstrap, const std::string& host, uint16_t port, Options options)
    : io_(ThreadIo::get()),
      bootstrap_(std::move(bootstrap)),
      options_(std::move(options)),
      gated_(options_.connection.security != nullptr && options_.connection.gated),
      tasks_(*this) {
  options_.limits.message_bytes = options_.connection.max_message_bytes;
  const int fd = listen_socket(host, port, options_.connection.socket, port_);
  listener_ = io_->low_level().wrapListenSocketFd(
      fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
              kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
              kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK);
  tasks_.add(accept_loop());
}

RpcServer::RpcServer(Bootstrap bootstrap, Options options)
    : io_(ThreadIo::get()),
      bootstrap_(std::move(bootstrap)),
      options_(std::move(options)),
      gated_(options_.connection.security != nullptr && options_.connection.gated),
      tasks_(*this) {
  options_.limits.message_bytes = options_.connection.max_message_bytes;
}

RpcServer::RpcServer(capnp::Capability::Client main, const std::string& host, uint16_t port,
                     const ConnectionOptions& options)
    : RpcServer(
          [shared = std::make_shared<capnp::Capability::Client>(kj::mv(main))](
              std::shared_ptr<ConnectionTrust>) { return capnp::Capability::Client(*shared); },
          host, port, ungated(options)) {}

RpcServer::~RpcServer() noexcept(false) = default;

kj::Promise<void> RpcServer::accept_loop() {
  return listener_->accept()
      .then([this](kj::Own<kj::AsyncIoStream> stream) {
        serve(kj::mv(stream));
        return accept_loop();
      })
      .catch_([this](kj::Exception&& e) {
        // Out of descriptors, say: keep listening once some are free again.
        refused("(listener)", "accept failed: " + kj_reason(e));
        return io_->timer().afterDelay(100 * kj::MILLISECONDS).then([this]() {
          return accept_loop();
        });
      });
}

void RpcServer::refused(const std::string& peer, const std::string& why) {
  if (!options_.on_refused) return;
  // A budget of lines that refills with time: connections that each break a rule cannot flood
  // the log; what was left out is counted in the next line that is written.
  const double now = std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  if (!log_budget_.take(now)) return;
  if (const uint64_t left_out = log_budget_.left_out(); left_out > 0) {
    options_.on_refused("(listener)", std::to_string(left_out) +
                                          " refusals not logged (more than " +
                                          std::to_string(static_cast<int>(log_budget_.per_second())) +
                                          " a second)");
  }
  options_.on_refused(peer, why);
}

bool RpcServer::admit(const std::string& host, const std::string& peer) {
  // The first refusal of a burst is reported; the others are counted and reported together once
  // a connection ends.
  if (options_.max_connections > 0 && connections_ >= options_.max_connections) {
    if (refused_over_total_++ == 0) {
      refused(peer, "more than " + std::to_string(options_.max_connections) +
                        " connections in all (closed at once)");
    }
    return false;
  }
  auto it = peers_.find(host);
  if (options_.max_connections_per_peer > 0 && it != peers_.end() &&
      it->second.connections >= options_.max_connections_per_peer) {
    if (it->second.refused_since_reported++ == 0) {
      refused(peer, "more than " + std::to_string(options_.max_connections_per_peer) +
                        " connections from " + host + " (closed at once)");
    }
    return false;
  }
  ++connections_;
  ++peers_[host].connections;
  return true;
}

void RpcServer::release(const std::string& host) {
  --connections_;
  if (refused_over_total_ > 1) {
    refused("(listener)", std::to_string(refused_over_total_ - 1) +
                              " more connections closed at once: more than " +
                              std::to_string(options_.max_connections) + " in all");
  }
  refused_over_total_ = 0;
  auto it = peers_.find(host);
  if (it == peers_.end()) return;
  auto& count = it->second;
  --count.connections;
  if (count.refused_since_reported > 1) {
    refused(host, std::to_string(count.refused_since_reported - 1) +
                      " more connections closed at once: more than " +
                      std::to_string(options_.max_connections_per_peer) + " from " + host);
  }
  count.refused_since_reported = 0;
  if (count.connections == 0) peers_.erase(it);
}

namespace {

// Reads and drops what the peer still sends, up to 64 KiB, until it closes: a socket closed with
// unread bytes resets the connection, and the peer would lose what was written to it last.
kj::Promise<void> drain(kj::AsyncIoStream& stream, size_t left) {
  if (left == 0) return kj::READY_NOW;
  auto buffer = kj::heapArray<kj::byte>(4096);
  auto read = stream.tryRead(buffer.begin(), 1, buffer.size());
  return read.then([&stream, left, buffer = kj::mv(buffer)](size_t n) -> kj::Promise<void> {
    if (n == 0) return kj::READY_NOW;
    return drain(stream, n < left ? left - n : 0);
  });
}

// `answer` written to the peer in its own protocol, then the connection closed; rejects with
// `refusal` (what the daemon logs).
kj::Promise<kj::Own<kj::AsyncIoStream>> answer_and_refuse(kj::Own<kj::AsyncIoStream> stream,
                                                          kj::Array<kj::byte> answer,
                                                          std::string refusal) {
  auto& s = *stream;
  auto written = s.write(answer.begin(), answer.size()).attach(kj::mv(answer));
  return written
      .then([&s]() {
        s.shutdownWrite();
        return drain(s, 64 * 1024);
      })
      .catch_([](kj::Exception&&) {})  // the refusal is what matters, not how the answer went
      .then([refusal = kj::mv(refusal)]() -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        return kj_failure(refusal);
      })
      .attach(kj::mv(stream));
}

}  // namespace

kj::Promise<kj::Own<kj::AsyncIoStream>> RpcServer::secure(
    std::shared_ptr<TransportSecurity> security, kj::Own<kj::AsyncIoStream> stream) {
  // The first byte says which protocol the client speaks (protocol_mismatch.h).
  auto first = kj::heapArray<kj::byte>(1);
  auto& s = *stream;
  auto read = s.tryRead(first.begin(), 1, 1);
  return read.then([this, security = std::move(security), stream = kj::mv(stream),
                    first = kj::mv(first)](size_t n) mutable
                   -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
    if (n == 0) return kj_failure("closed at once", kj::Exception::Type::DISCONNECTED);
    if (starts_data_channel(first[0])) return hand_over_channel(kj::mv(stream));
    const bool hello = starts_tls(first[0]);
    if (!security->insecure() && !hello) {
      return answer_and_refuse(kj::mv(stream), plain_abort_message(kDaemonSpeaksTls),
                               "refused: speaks plain TCP, this daemon TLS (a client with "
                               "--insecure?)");
    }
    if (security->insecure() && hello) {
      return answer_and_refuse(kj::mv(stream), tls_protocol_version_alert(),
                               "refused: speaks TLS, this daemon plain TCP (--insecure)");
    }
    return security->wrap_server(kj::heap<ReplayStream>(kj::mv(stream), kj::mv(first)));
  });
}

kj::Promise<kj::Own<kj::AsyncIoStream>> RpcServer::hand_over_channel(
    kj::Own<kj::AsyncIoStream> stream) {
  // The first byte was the preface's; the rest of it and the token follow.
  auto rest = kj::heapArray<kj::byte>(kChannelPrefaceBytes - 1);
  auto& s = *stream;
  auto read = s.read(rest.begin(), rest.size());
  return read.then([this, stream = kj::mv(stream), rest = kj::mv(rest)]() mutable
                   -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
    const std::string peer = peer_address(*stream);
    const size_t magic = sizeof(kChannelPreface) - 1;
    std::string refusal;
    if (std::memcmp(rest.begin(), kChannelPreface + 1, magic) != 0) {
      refusal = "refused: neither TLS, Cap'n Proto nor a data channel";
    } else if (!options_.on_data_channel) {
      refusal = "refused: a data channel, which this server does not take";
    } else {
      int fd = -1;
      KJ_IF_MAYBE(own, stream->getFd()) { fd = ::dup(*own); }
      if (fd < 0) {
        refusal = "refused: a data channel without a socket";
      } else {
        // The token's holder owns the socket from here; the stream closes its own descriptor.
        refusal = options_.on_data_channel(
            std::string(reinterpret_cast<const char*>(rest.begin()) + magic, kChannelTokenBytes),
            fd, peer);
        if (!refusal.empty()) refusal = "refused: a data channel: " + refusal;
      }
    }
    if (!refusal.empty()) refused(peer, without_refused(refusal));
    return kj_failure("handed over", kj::Exception::Type::DISCONNECTED);
  });
}

void RpcServer::adopt(kj::Own<kj::AsyncIoStream> stream, const std::string& peer) {
  serve(kj::mv(stream), peer);
}

void RpcServer::serve(kj::Own<kj::AsyncIoStream> stream, const std::string& peer) {
  auto trust = std::make_shared<ConnectionTrust>();
  trust->peer = peer.empty() ? peer_address(*stream) : peer + " (relayed)";
  trust->opened = !gated_;
  const std::string host = peer_host(peer.empty() ? trust->peer : peer);
  if (!admit(host, trust->peer)) return;  // `stream` closes here
  // However the connection ends, it is counted out.
  auto counted = kj::defer([this, host]() { release(host); });
  kj::Promise<kj::Own<kj::AsyncIoStream>> secured = nullptr;
  if (options_.connection.security) {
    secured = io_->timer().timeoutAfter(options_.handshake_timeout,
                                        secure(options_.connection.security, kj::mv(stream)));
  } else {
    secured = kj::Promise<kj::Own<kj::AsyncIoStream>>(kj::mv(stream));
  }
  auto served = secured.then(
      [this, trust](kj::Own<kj::AsyncIoStream> secure) -> kj::Promise<void> {
        auto guarded = kj::heap<GuardedStream>(
            kj::mv(secure), trust, options_.limits,
            [this, trust](const std::string& why) { refused(trust->peer, why); }, &io_->timer(),
            options_.timeouts);
        auto connection = kj::heap<Served>(kj::mv(guarded),
                                           reader_options(options_.connection.max_message_bytes),
                                           bootstrap_(trust));
        kj::Promise<void> done = connection->network.onDisconnect().then([this, trust]() {
          // Cap'n Proto ends a connection whose message it cannot read (a malformed frame)
          // without a word to us: said here, unless the reader or the gate said why already.
          if (gated_ && !trust->opened && !trust->refusal_reported && trust->read_before_open > 0) {
            refused(trust->peer, "closed before authentication after " +
                                     std::to_string(trust->read_before_open) +
                                     " bytes (a malformed message, or a client that left)");
          }
        });
        if (gated_) {
          done = done.exclusiveJoin(
              io_->timer().afterDelay(options_.open_timeout).then([this, trust]() -> kj::Promise<void> {
                if (trust->opened) return kj::NEVER_DONE;
                refused(trust->peer, "not authenticated in time");
                return kj::READY_NOW;  // ends the connection
              }));
        }
        return done.attach(kj::mv(connection));
      },
      [this, trust](kj::Exception&& e) -> kj::Promise<void> {
        // A peer that connects and leaves (a port probe) is no refusal.
        if (e.getType() == kj::Exception::Type::DISCONNECTED) return kj::READY_NOW;
        if (e.getType() == kj::Exception::Type::OVERLOADED) {
          // Under --insecure only the first byte was awaited: a client that sent nothing.
          refused(trust->peer, options_.connection.security->insecure() ? "not authenticated in time"
                                                                        : "no TLS handshake in time");
        } else {
          refused(trust->peer, without_refused(kj_reason(e)));
        }
        return kj::READY_NOW;
      });
  tasks_.add(served.attach(kj::mv(counted)));
}

void RpcServer::taskFailed(kj::Exception&& exception) {
  // A connection that ended in an error: it is gone, and the server serves on.
  (void)exception;
}

// ---- client -------------------------------------------------------------------------------------

struct RpcClient::Live {
  Live(kj::Own<kj::AsyncIoStream> stream_in, const capnp::ReaderOptions& options)
      : stream(kj::mv(stream_in)),
        network(*stream, capnp::rpc::twoparty::Side::CLIENT, options),
        rpc(capnp::makeRpcClient(network)) {}
  capnp::Capability::Client bootstrap() {
    capnp::word scratch[4] = {};
    capnp::MallocMessageBuilder message(scratch);
    auto server = message.getRoot<capnp::rpc::twoparty::VatId>();
    server.setSide(capnp::rpc::twoparty::Side::SERVER);
    return rpc.bootstrap(server);
  }
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

RpcClient::RpcClient(const std::string& address, const ConnectionOptions& options)
    : io_(ThreadIo::get()), options_(options), trust_(std::make_shared<ConnectionTrust>()) {
  trust_->peer = address;
  start(io_->network().parseAddress(address).then([](kj::Own<kj::NetworkAddress> to) {
    return to->connect().attach(kj::mv(to));
  }));
}

RpcClient::RpcClient(const std::string& host, uint16_t port, const ConnectionOptions& options)
    : io_(ThreadIo::get()), options_(options), trust_(std::make_shared<ConnectionTrust>()) {
  trust_->peer = host + ":" + std::to_string(port);
  AddrInfo info;
  resolve(host, port, false, info);
  int last_error = 0;
  for (const addrinfo* ai = info.list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last_error = errno;
      continue;
    }
    // Buffer sizes must be set before connect() to affect the TCP window negotiation.
    tune_socket(fd.get(), options.socket);
    if (!connect_blocking(fd.get(), ai, last_error)) continue;
    start(io_->low_level().wrapSocketFd(
        fd.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                          kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC));
    return;
  }
  KJ_FAIL_SYSCALL("connect", last_error, host, port);
}

RpcClient::~RpcClient() noexcept(false) {
  canceler_.cancel(kj_failure("the connection to " + trust_->peer + " was dropped",
                              kj::Exception::Type::DISCONNECTED));
}

void RpcClient::start(kj::Promise<kj::Own<kj::AsyncIoStream>> connected) {
  trust_->opened = options_.security == nullptr || !options_.gated;
  auto security = options_.security;
  auto secured = connected.then([security, peer = trust_->peer](kj::Own<kj::AsyncIoStream> stream) {
    if (!security) return kj::Promise<kj::Own<kj::AsyncIoStream>>(kj::mv(stream));
    return security->wrap_client(kj::mv(stream), peer);
  });
  const auto limit = options_.connect_timeout;
  const auto seconds = static_cast<long>(limit / kj::MILLISECONDS + 999) / 1000;
  setup_ = canceler_.wrap(secured
               .exclusiveJoin(io_->timer().afterDelay(limit).then(
                   [peer = trust_->peer, seconds,
                    secured = security != nullptr]() -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
                     return kj_failure("no connection to " + peer + " in " +
                                           std::to_string(seconds) + " s (" +
                                           (secured ? "connect and TLS handshake" : "connect") +
                                           "): it, or a relay on the way, does not answer",
                                       kj::Exception::Type::DISCONNECTED);
                   }))
               .then([this](kj::Own<kj::AsyncIoStream> stream) {
                 MessageLimits limits;
                 limits.message_bytes = options_.max_message_bytes;
                 auto guarded = kj::heap<GuardedStream>(kj::mv(stream), trust_, limits, nullptr);
                 live_ = kj::heap<Live>(kj::mv(guarded), reader_options(options_.max_message_bytes));
               }))
               .fork();
}

capnp::Capability::Client RpcClient::bootstrap() {
  KJ_IF_MAYBE(live, live_) { return (*live)->bootstrap(); }
  return canceler_.wrap(
      setup_.addBranch().then([this]() { return KJ_ASSERT_NONNULL(live_)->bootstrap(); }));
}

}  // namespace ravnest::wire
