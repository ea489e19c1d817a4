// The TCP transport of the daemons and requesters: Cap'n Proto two-party RPC over TCP, under TLS
// and behind the gate (transport_security.h, gate.h), or plain for the tests and benchmarks of
// the wire itself; and what each connection's reader enforces (guarded_stream.h).
//
// RpcServer listens (a socket it tunes itself) and serves every connection on the calling
// thread's event loop (thread_io.h): for each, the TLS handshake, bounded in time; a
// GuardedStream; a TwoPartyVatNetwork and RpcSystem of its own, with the bootstrap capability a
// factory makes for that connection (the daemon's: a GateServer). A connection whose handshake
// fails, that breaks its limits, that ends before it was opened after sending something (a
// malformed message, which Cap'n Proto ends silently) or is not opened in time is closed and
// reported once through `on_refused`, naming the peer; the server goes on serving the others.
// Reports are rate-limited (a burst of 20, then 2 a second; the ones left out are counted in the
// next), so that abuse cannot flood the log.
//
// RpcClient connects to one server and gives its bootstrap capability; calls on it wait for the
// connection, and fail with its reason when it cannot be made (or is not made, TLS handshake
// included, within ConnectionOptions::connect_timeout). Destroyed before it connected, it
// cancels the connect: calls still waiting fail with "the connection to ADDRESS was dropped".
//
// Create, use and destroy both on one thread.
#pragma once

#include <capnp/capability.h>
#include <capnp/message.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "libs/wire/guarded_stream.h"
#include "libs/wire/line_budget.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/transport_security.h"

namespace ravnest::wire {

// The largest message a connection reads once open (and sends: capnp refuses to send a message
// above its own reader's limit). A Data field is at most 512 MiB.
constexpr uint64_t kDefaultMaxMessageBytes = uint64_t{1} << 30;

// ReaderOptions with traversalLimitInWords = max_message_bytes / 8 and nesting limit 64.
capnp::ReaderOptions reader_options(uint64_t max_message_bytes = kDefaultMaxMessageBytes);

struct SocketOptions {
  bool no_delay = true;    // TCP_NODELAY (Nagle + delayed ACKs stall request/response traffic)
  int send_buffer = 0;     // SO_SNDBUF in bytes; 0 keeps the kernel's autotuning. Note: capnp
                           // sizes its streaming window from SO_SNDBUF.
  int receive_buffer = 0;  // SO_RCVBUF in bytes; 0 keeps autotuning
};

struct ConnectionOptions {
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  SocketOptions socket;
  // TLS (or plain TCP with --insecure) and the credentials the gate's proofs use. Null: plain TCP
  // and no gate, for the tests and benchmarks of the wire itself.
  std::shared_ptr<TransportSecurity> security;
  // With `security`: the connection reads under the limits before authentication until its gate
  // opens it. False: open from the start (benchmarks of TLS without a gate).
  bool gated = true;
  // A client's connect and TLS handshake, together: the server gives up on a handshake after
  // its own handshake_timeout (10 s by default, a daemon's handshake_seconds), so a client that
  // waited longer would wait for a connection the server has dropped. What it bounds is a peer,
  // or a relay on the way, that accepts a connection and then says nothing (frozen by SIGSTOP,
  // stalled): every call over the connection then fails, in one line, instead of waiting.
  kj::Duration connect_timeout = 10 * kj::SECONDS;
};

// Applies `options` to a TCP socket; throws kj::Exception on failure.
void tune_socket(int fd, const SocketOptions& options);

// "127.0.0.1:43210" ("[::1]:43210"), or "unknown peer" when the stream cannot tell.
std::string peer_address(kj::AsyncIoStream& stream);
// The host of such an address: "127.0.0.1", "[::1]".
std::string peer_host(const std::string& address);

class RpcServer : private kj::TaskSet::ErrorHandler {
 public:
  struct Options {
    ConnectionOptions connection;  // with `security` and `gated`: every connection starts closed
    MessageLimits limits;          // message_bytes is connection.max_message_bytes
    kj::Duration handshake_timeout = 10 * kj::SECONDS;
    kj::Duration open_timeout = 10 * kj::SECONDS;  // from the end of the handshake to open
    ConnectionTimeouts timeouts;  // slow messages, idle connections (guarded_stream.h)
    // Connections served at once, in all and from one peer host (its address without the port);
    // one more is closed at once. 0: no limit.
    size_t max_connections = 0;
    size_t max_connections_per_peer = 0;
    // (peer, why): a connection refused (handshake, limits, not opened in time, too many). Of a
    // host over its connection limit, the first refusal is reported, then how many followed
    // once it is under the limit again.
    std::function<void(const std::string&, const std::string&)> on_refused;
    // A connection that opens with a data channel's preface (data_channel.h): (its token, its
    // socket, the peer's address). The callee owns the descriptor from then on (closes it when
    // it refuses) and returns "" when it expected the token, else why not (a refusal). Unset:
    // such connections are refused. Runs on this thread.
    std::function<std::string(const std::string&, int, const std::string&)> on_data_channel;
  };
  // What a connection is served: its trust is opened by the gate the factory hands out.
  using Bootstrap = std::function<capnp::Capability::Client(std::shared_ptr<ConnectionTrust>)>;

  // Listens on host:port (port 0: a free port, see port()); throws kj::Exception when it cannot.
  RpcServer(Bootstrap bootstrap, const std::string& host, uint16_t port, Options options);
  // Listens nowhere: serves only the streams adopt() hands it (a daemon behind NAT, whose
  // connections come through a relay: relay_link.h). port() is 0.
  RpcServer(Bootstrap bootstrap, Options options);
  // `main` to every connection, plain TCP, open from the start (tests and benchmarks of the wire).
  RpcServer(capnp::Capability::Client main, const std::string& host = "127.0.0.1",
            uint16_t port = 0, const ConnectionOptions& options = {});
  ~RpcServer() noexcept(false);

  uint16_t port() const { return port_; }
  kj::WaitScope& wait_scope() { return io_->wait_scope(); }
  kj::Timer& timer() { return io_->timer(); }

  // A connection made elsewhere (a relayed session: relay_link.h), served as an accepted one:
  // the same handshake, limits, gate and data-channel preface. `peer` is the host:port of the
  // far end as the relay saw it: what the limits per host count and the logs name (with
  // " (relayed)").
  void adopt(kj::Own<kj::AsyncIoStream> stream, const std::string& peer);

 private:
  struct Served;
  struct PeerCount {
    size_t connections = 0;
    size_t refused_since_reported = 0;
  };
  kj::Promise<void> accept_loop();
  // Counts a new connection of `host`; false (and reported) when it is one too many.
  bool admit(const std::string& host, const std::string& peer);
  void release(const std::string& host);
  // `peer`: the far end's host:port; empty: the stream's own peer.
  void serve(kj::Own<kj::AsyncIoStream> stream, const std::string& peer = "");
  // The connection under `security`: its first byte read to refuse, in the client's own protocol,
  // a client that disagrees on --insecure (protocol_mismatch.h), then the TLS handshake. A data
  // channel's preface instead hands the socket to options_.on_data_channel and ends here.
  kj::Promise<kj::Own<kj::AsyncIoStream>> secure(std::shared_ptr<TransportSecurity> security,
                                                 kj::Own<kj::AsyncIoStream> stream);
  // The rest of a data channel's preface read, the socket handed over; always rejects
  // (DISCONNECTED: nothing more to serve; a refusal is reported here).
  kj::Promise<kj::Own<kj::AsyncIoStream>> hand_over_channel(kj::Own<kj::AsyncIoStream> stream);
  void refused(const std::string& peer, const std::string& why);
  void taskFailed(kj::Exception&& exception) override;

  kj::Own<ThreadIo> io_;  // first: the event loop outlives everything below
  Bootstrap bootstrap_;
  Options options_;
  bool gated_ = false;
  uint16_t port_ = 0;
  kj::Own<kj::ConnectionReceiver> listener_;
  size_t connections_ = 0;
  size_t refused_over_total_ = 0;
  // refused()'s lines: a burst of 20, then 2 a second.
  LineBudget log_budget_{20, 2};
  std::map<std::string, PeerCount> peers_;  // hosts with connections
  kj::TaskSet tasks_;  // the accept loop and every connection
};

class RpcClient {
 public:
  // Connects to "host:port" (a name, an IPv4 or IPv6 address) in the background.
  RpcClient(const std::string& address, const ConnectionOptions& options);
  // Connects now (blocking), over a socket tuned before connect() (options.socket).
  RpcClient(const std::string& host, uint16_t port, const ConnectionOptions& options = {});
  ~RpcClient() noexcept(false);

  // The server's bootstrap capability. Get it once per connection: capnp 0.9 aborts on a
  // bootstrap over a connection that has died, where calls on a kept capability just fail.
  capnp::Capability::Client bootstrap();
  template <typename T>
  typename T::Client main() {
    return bootstrap().castAs<T>();
  }
  // The connection's trust: the client's gate opens it once the server proved the secret.
  const std::shared_ptr<ConnectionTrust>& trust() const { return trust_; }

  kj::WaitScope& wait_scope() { return io_->wait_scope(); }
  kj::Timer& timer() { return io_->timer(); }

 private:
  struct Live;
  void start(kj::Promise<kj::Own<kj::AsyncIoStream>> connected);

  kj::Own<ThreadIo> io_;  // first: the event loop outlives everything below
  ConnectionOptions options_;
  std::shared_ptr<ConnectionTrust> trust_;
  kj::Maybe<kj::Own<Live>> live_;  // once connected
  // Cancels the connect and handshake on destruction: a branch of setup_ held by a call outlives
  // this client, and a handshake that completed after it (a frozen relay continued) made a Live
  // in freed memory (`ravnest train --elastic` crashed in GuardedStream::tryRead).
  kj::Canceler canceler_;
  kj::ForkedPromise<void> setup_ = nullptr;
};

}  // namespace ravnest::wire
