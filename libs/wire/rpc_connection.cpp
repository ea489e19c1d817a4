#include "libs/wire/rpc_connection.h"

#include <kj/debug.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

capnp::ReaderOptions rpc_reader_options() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = uint64_t{1} << 40;
  options.nestingLimit = 64;
  return options;
}

capnp::ReaderOptions reader_options(uint64_t max_message_bytes) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = max_message_bytes / sizeof(capnp::word);
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

RpcServer::RpcServer(capnp::Capability::Client main, const std::string& host, uint16_t port,
                     const ConnectionOptions& options) {
  AddrInfo info;
  resolve(host, port, true, info);
  const addrinfo* ai = info.list;
  KJ_REQUIRE(ai != nullptr, "no address to listen on", host);
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (fd.get() < 0) {
    int error = errno;
    KJ_FAIL_SYSCALL("socket", error);
  }
  int one = 1;
  KJ_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  // Accepted sockets inherit these (TCP_NODELAY, buffer sizes) from the listener on Linux.
  tune_socket(fd.get(), options.socket);
  KJ_SYSCALL(::bind(fd.get(), ai->ai_addr, ai->ai_addrlen), host, port);
  KJ_SYSCALL(::listen(fd.get(), SOMAXCONN));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  KJ_SYSCALL(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len));
  port_ = bound.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server_ = kj::heap<capnp::EzRpcServer>(kj::mv(main), fd.get(), port_,
                                         reader_options(options.max_message_bytes));
  // EzRpcServer wraps the socket without owning it: closed in the destructor, so that the port
  // is free again once the server is gone.
  listen_fd_ = fd.release();
}

RpcServer::~RpcServer() noexcept(false) {
  server_ = nullptr;
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

RpcClient::RpcClient(const std::string& host, uint16_t port, const ConnectionOptions& options) {
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
    client_ = kj::heap<capnp::EzRpcClient>(fd.get(), reader_options(options.max_message_bytes));
    fd.release();
    return;
  }
  KJ_FAIL_SYSCALL("connect", last_error, host, port);
}

RpcClient::~RpcClient() noexcept(false) = default;

}  // namespace ravnest::wire
