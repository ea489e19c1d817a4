// Loopback throughput of libs/wire against a plain TCP socket, measured in the same run.
//
//   bench_wire_throughput [--reps N] [--mib M] [--chunk-kib K] [--sndbuf BYTES] [--nagle]
//                         [--inline] [--ez] [--tls] [--raw-reuse] [--no-huge-pages]
//
// (a) raw: a sender writes M MiB on a connected TCP socket, the receiver (another process)
//     reads them into freshly allocated memory (--raw-reuse: one buffer reused, already paged
//     in) and answers one byte; timed at the sender from the first write to the answer.
//     Both receivers advise transparent huge pages on their fresh memory, as libs/wire does by
//     default for streamed tensors >= 32 MiB (--no-huge-pages: neither does).
// (b) wire: the same bytes as one float32 tensor in a Transfer to Node.send over capnp RPC
//     (libs/wire RpcServer/RpcClient): encode_values, send, stream_tensors through the returned
//     ByteSink into a TensorSink, done(); timed at the sender from the send() call until done()
//     returned. The receiver allocates its tensor (at::empty) per transfer.
//     --inline sends the tensor inside the Transfer message instead (one message of M MiB);
//     --ez uses capnp::EzRpcServer/EzRpcClient with an address (sockets KJ creates, TCP_NODELAY
//     set by KJ) instead of libs/wire's RpcServer/RpcClient on sockets we create and tune;
//     --tls runs the wire connection over TLS with a secret's certificates (what every ravnest
//     connection runs unless --insecure: libs/wire/transport_security.h), without the gate.
// Both receivers are child processes (this program re-executed); the sender is this process.
// Repetitions alternate raw and wire so the machine's noise hits both alike. GB/s = 1e9 B/s.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <kj/debug.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "libs/wire/rpc_connection.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transport_security.h"
#include "libs/wire/value_codec.h"

namespace schema = ravnest::schema;
using namespace ravnest::wire;

namespace {

struct Options {
  int reps = 9;
  size_t mib = 64;
  size_t chunk = kDefaultChunkBytes;
  int sndbuf = 0;
  bool nagle = false;
  bool inline_all = false;  // the whole tensor inline in the Transfer message (one big message)
  bool ez = false;          // plain EzRpcServer/EzRpcClient on sockets KJ creates
  bool tls = false;         // the wire connection over TLS (transport_security.h)
  bool raw_reuse = false;   // the raw receiver reads into one buffer reused across repetitions
  bool huge_pages = true;   // both receivers madvise(MADV_HUGEPAGE) their fresh memory
};


double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(2);
}

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("write");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The wire connection's options: tuned sockets, and TLS with --tls.
ConnectionOptions connection_options(const Options& o);

SocketOptions socket_options(const Options& o) {
  SocketOptions s;
  s.no_delay = !o.nagle;
  s.send_buffer = o.sndbuf;
  s.receive_buffer = o.sndbuf;
  return s;
}

ConnectionOptions connection_options(const Options& o) {
  ConnectionOptions c;
  c.socket = socket_options(o);
  if (o.tls) {
    c.security = make_transport_security("wire_throughput");
    c.gated = false;
  }
  return c;
}

int listen_loopback(const Options& o, uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  tune_socket(fd, socket_options(o));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
  if (::listen(fd, 4) != 0) die("listen");
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// ---- (a) raw receiver: per repetition, read `bytes` into fresh memory, answer one byte.
int raw_receiver(int port_pipe, const Options& o) {
  uint16_t port;
  int listener = listen_loopback(o, port);
  write_all(port_pipe, &port, sizeof port);
  ::close(port_pipe);
  int fd = ::accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  size_t bytes = o.mib << 20;
  char* reused = nullptr;
  if (o.raw_reuse) {
    reused = static_cast<char*>(std::malloc(bytes));
    std::memset(reused, 0, bytes);
  }
  for (;;) {
    // Fresh memory per transfer, like the tensor the wire receiver allocates, unless --raw-reuse.
    char* buffer = o.raw_reuse ? reused : static_cast<char*>(std::malloc(bytes));
    if (!o.raw_reuse && o.huge_pages) advise_huge_pages(buffer, bytes);
    bool ok = read_all(fd, buffer, bytes);
    if (!o.raw_reuse) std::free(buffer);
    if (!ok) break;
    char ack = 1;
    write_all(fd, &ack, 1);
  }
  return 0;
}

// ---- (b) wire receiver: Node.send decodes the transfer and opens a TensorSink.
class BenchNode final : public schema::Node::Server, private kj::TaskSet::ErrorHandler {
 public:
  explicit BenchNode(bool huge_pages) : tasks_(*this) {
    if (!huge_pages) limits_.huge_pages_from = 0;
  }

 protected:
  kj::Promise<void> send(SendContext context) override {
    std::vector<at::Tensor> pending;
    auto values = decode_values(context.getParams().getTransfer(), pending, limits_);
    if (pending.empty()) return kj::READY_NOW;
    auto opened = TensorSink::open(std::move(pending));
    context.getResults().setSink(kj::mv(opened.sink));
    tasks_.add(opened.completion.attach(std::move(values)));
    return kj::READY_NOW;
  }

 private:
  void taskFailed(kj::Exception&& e) override { KJ_LOG(ERROR, e); }
  DecodeLimits limits_;
  kj::TaskSet tasks_;
};

int wire_receiver(int port_pipe, const Options& o) {
  if (o.ez) {
    capnp::EzRpcServer server(kj::heap<BenchNode>(o.huge_pages), "127.0.0.1", 0, reader_options());
    uint16_t port = static_cast<uint16_t>(server.getPort().wait(server.getWaitScope()));
    write_all(port_pipe, &port, sizeof port);
    ::close(port_pipe);
    kj::NEVER_DONE.wait(server.getWaitScope());
  }
  RpcServer server(kj::heap<BenchNode>(o.huge_pages), "127.0.0.1", 0, connection_options(o));
  uint16_t port = server.port();
  write_all(port_pipe, &port, sizeof port);
  ::close(port_pipe);
  kj::NEVER_DONE.wait(server.wait_scope());
}

// Starts this program again as a receiver; returns its port.
pid_t spawn(const char* self, const char* role, const Options& o, uint16_t& port) {
  int p[2];
  if (::pipe(p) != 0) die("pipe");
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    ::close(p[0]);
    std::string fd = std::to_string(p[1]);
    std::string reps = std::to_string(o.reps), mib = std::to_string(o.mib),
                chunk = std::to_string(o.chunk / 1024), sndbuf = std::to_string(o.sndbuf);
    std::vector<const char*> argv = {self,     "--role",  role,           "--port-fd",
                                     fd.c_str(), "--mib", mib.c_str(),    "--chunk-kib",
                                     chunk.c_str(), "--sndbuf", sndbuf.c_str()};
    if (o.nagle) argv.push_back("--nagle");
    if (o.ez) argv.push_back("--ez");
    if (o.tls) argv.push_back("--tls");
    if (o.raw_reuse) argv.push_back("--raw-reuse");
    if (!o.huge_pages) argv.push_back("--no-huge-pages");
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", const_cast<char* const*>(argv.data()));
    die("execv");
  }
  ::close(p[1]);
  if (!read_all(p[0], &port, sizeof port)) {
    std::fprintf(stderr, "receiver %s did not start\n", role);
    std::exit(2);
  }
  ::close(p[0]);
  return pid;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string role;
  int port_fd = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--reps") o.reps = std::atoi(next());
    else if (a == "--mib") o.mib = std::strtoull(next(), nullptr, 10);
    else if (a == "--chunk-kib") o.chunk = std::strtoull(next(), nullptr, 10) * 1024;
    else if (a == "--sndbuf") o.sndbuf = std::atoi(next());
    else if (a == "--nagle") o.nagle = true;
    else if (a == "--inline") o.inline_all = true;
    else if (a == "--ez") o.ez = true;
    else if (a == "--tls") o.tls = true;
    else if (a == "--raw-reuse") o.raw_reuse = true;
    else if (a == "--no-huge-pages") o.huge_pages = false;
    else if (a == "--role") role = next();
    else if (a == "--port-fd") port_fd = std::atoi(next());
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--mib M] [--chunk-kib K] [--sndbuf BYTES] [--nagle] "
                   "[--inline] [--ez] [--tls] [--raw-reuse] [--no-huge-pages]\n",
                   argv[0]);
      return 2;
    }
  }
  at::set_num_threads(1);
  if (role == "raw") return raw_receiver(port_fd, o);
  if (role == "wire") return wire_receiver(port_fd, o);

  const size_t bytes = o.mib << 20;
  std::printf("wire_throughput: %zu MiB over 127.0.0.1, %d repetitions, chunk %zu KiB, "
              "TCP_NODELAY %s, SO_SNDBUF/SO_RCVBUF %s%s%s%s%s%s\n",
              o.mib, o.reps, o.chunk / 1024, o.nagle ? "off" : "on",
              o.sndbuf > 0 ? std::to_string(o.sndbuf).c_str() : "autotuned",
              o.inline_all ? ", tensor inline (one message)" : "",
              o.ez ? ", plain EzRpc sockets" : "", o.tls ? ", wire over TLS" : "",
              o.raw_reuse ? ", raw receiver reuses its buffer" : "",
              o.huge_pages ? "" : ", no huge pages");

  uint16_t raw_port = 0, wire_port = 0;
  pid_t raw_pid = spawn(argv[0], "raw", o, raw_port);
  pid_t wire_pid = spawn(argv[0], "wire", o, wire_port);

  // Raw sender socket.
  int raw = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  tune_socket(raw, socket_options(o));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(raw_port);
  if (::connect(raw, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");

  ConnectionOptions c = connection_options(o);
  kj::Own<RpcClient> ours;
  kj::Own<capnp::EzRpcClient> ez;
  if (o.ez) {
    ez = kj::heap<capnp::EzRpcClient>("127.0.0.1", wire_port, reader_options());
  } else {
    ours = kj::heap<RpcClient>("127.0.0.1", wire_port, c);
  }
  kj::WaitScope& scope = o.ez ? ez->getWaitScope() : ours->wait_scope();
  auto node = o.ez ? ez->getMain<schema::Node>() : ours->main<schema::Node>();

  at::Tensor tensor = at::rand({static_cast<int64_t>(bytes / 4)});
  const char* raw_data = static_cast<const char*>(tensor.data_ptr());

  auto run_wire = [&]() {
    double t0 = now_s();
    auto request = node.sendRequest();
    auto encoded = encode_values(request.initTransfer(), {{0, tensor}},
                                 o.inline_all ? kMaxDataBytes : kDefaultInlineLimit);
    auto response = request.send().wait(scope);
    if (!encoded.streamed.empty()) {
      stream_tensors(response.getSink(), std::move(encoded.streamed), o.chunk).wait(scope);
    }
    return now_s() - t0;
  };
  auto run_raw = [&]() {
    double t0 = now_s();
    write_all(raw, raw_data, bytes);
    char ack;
    if (!read_all(raw, &ack, 1)) die("raw receiver closed");
    return now_s() - t0;
  };

  run_raw();  // warm-up: connections, allocator, page cache of the code
  run_wire();
  std::vector<double> raw_gbs, wire_gbs;
  for (int r = 0; r < o.reps; ++r) {
    double tr = run_raw();
    double tw = run_wire();
    raw_gbs.push_back(bytes / tr / 1e9);
    wire_gbs.push_back(bytes / tw / 1e9);
    std::printf("rep %2d  raw %6.3f GB/s  wire %6.3f GB/s  ratio %.2f\n", r + 1, raw_gbs.back(),
                wire_gbs.back(), wire_gbs.back() / raw_gbs.back());
    std::fflush(stdout);
  }
  double raw_med = median(raw_gbs), wire_med = median(wire_gbs);
  double raw_min = *std::min_element(raw_gbs.begin(), raw_gbs.end());
  double wire_min = *std::min_element(wire_gbs.begin(), wire_gbs.end());
  std::vector<double> ratios;
  for (size_t i = 0; i < raw_gbs.size(); ++i) ratios.push_back(wire_gbs[i] / raw_gbs[i]);
  std::printf("raw   median %.3f GB/s  worst %.3f GB/s\n", raw_med, raw_min);
  std::printf("wire  median %.3f GB/s  worst %.3f GB/s\n", wire_med, wire_min);
  std::printf("ratio wire/raw: median %.2f  worst %.2f (worst of per-repetition ratios %.2f)\n",
              wire_med / raw_med, wire_min / raw_min,
              *std::min_element(ratios.begin(), ratios.end()));

  ::close(raw);
  ::kill(raw_pid, SIGTERM);
  ::kill(wire_pid, SIGTERM);
  ::waitpid(raw_pid, nullptr, 0);
  ::waitpid(wire_pid, nullptr, 0);
  return 0;
}
