// The TCP transport of the daemons and requesters: capnp two-party RPC (EzRpc) over sockets we
// tune ourselves, and the reader options every connection uses.
//
// Two-party capnp RPC over TCP with the settings bulk transfers need: a message size limit large
// enough for stages and inline tensors (ReaderOptions::traversalLimitInWords binds on both ends:
// the sender refuses to send above its own limit), TCP_NODELAY on both ends, and sockets we
// create ourselves so their options can be tuned.
//
// Both classes wrap capnp::EzRpcServer/EzRpcClient, which use one KJ event loop per thread
// (created on first use): create, use and destroy them on one thread.
#pragma once

#include <capnp/ez-rpc.h>
#include <capnp/message.h>

#include <cstdint>
#include <string>

namespace ravnest::wire {

constexpr uint64_t kDefaultMaxMessageBytes = uint64_t{1} << 30;

// ReaderOptions with traversalLimitInWords = max_message_bytes / 8.
capnp::ReaderOptions reader_options(uint64_t max_message_bytes = kDefaultMaxMessageBytes);

// Reader options of every connection between daemons and requesters (EzRpcServer/EzRpcClient):
// tensors can be large (capnp's default limit is 64 MiB), so the limit is far above any message
// sent (2^40 words).
capnp::ReaderOptions rpc_reader_options();

struct SocketOptions {
  bool no_delay = true;    // TCP_NODELAY (Nagle + delayed ACKs stall request/response traffic)
  int send_buffer = 0;     // SO_SNDBUF in bytes; 0 keeps the kernel's autotuning. Note: capnp
                           // sizes its streaming window from SO_SNDBUF.
  int receive_buffer = 0;  // SO_RCVBUF in bytes; 0 keeps autotuning
};

struct ConnectionOptions {
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  SocketOptions socket;
};

// Applies `options` to a TCP socket; throws kj::Exception on failure.
void tune_socket(int fd, const SocketOptions& options);

// Listens on host:port (port 0: a free port, see port()) and serves `main` to every connection.
class RpcServer {
 public:
  RpcServer(capnp::Capability::Client main, const std::string& host = "127.0.0.1",
            uint16_t port = 0, const ConnectionOptions& options = {});
  ~RpcServer() noexcept(false);

  uint16_t port() const { return port_; }
  kj::WaitScope& wait_scope() { return server_->getWaitScope(); }
  capnp::EzRpcServer& ez() { return *server_; }

 private:
  kj::Own<capnp::EzRpcServer> server_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
};

// Connects (blocking, IPv4 or IPv6 numeric address or host name) to host:port.
class RpcClient {
 public:
  RpcClient(const std::string& host, uint16_t port, const ConnectionOptions& options = {});
  ~RpcClient() noexcept(false);

  template <typename T>
  typename T::Client main() {
    return client_->getMain<T>();
  }
  kj::WaitScope& wait_scope() { return client_->getWaitScope(); }
  capnp::EzRpcClient& ez() { return *client_; }

 private:
  kj::Own<capnp::EzRpcClient> client_;
};

}  // namespace ravnest::wire
