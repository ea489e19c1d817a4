// Throughput through a relay (libs/wire/relay.h: a node behind NAT) against a direct link to the
// same node, measured in the same run.
//
//   bench_relay_throughput [--reps N] [--mib M]
//
// Three processes on 127.0.0.1, as a deployment has three hosts: this one sends; a relay
// (wire::Relay); a node that serves Node.send twice, on a port of its own (the direct link) and,
// listening nowhere else, through the relay (wire::RelayLink, RpcServer::adopt). Each
// repetition sends M MiB as one float32 tensor in a Transfer (encode_values, send,
// stream_tensors into the node's TensorSink) over each link in turn, both over TLS with a
// secret's certificates (what every ravnest connection runs); timed at the sender from send()
// to the stream's end. GB/s = 1e9 B/s; the ratio relayed/direct is what the relay costs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <kj/debug.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "libs/wire/relay.h"
#include "libs/wire/relay_link.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transport_security.h"
#include "libs/wire/value_codec.h"

namespace schema = ravnest::schema;
using namespace ravnest::wire;

namespace {

constexpr const char* kSecret = "relay_throughput";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(2);
}

void put_port(int fd, uint16_t port) {
  if (::write(fd, &port, sizeof port) != sizeof port) die("write");
  ::close(fd);
}

uint16_t get_port(int fd) {
  uint16_t port = 0;
  if (::read(fd, &port, sizeof port) != sizeof port) {
    std::fprintf(stderr, "a child did not start\n");
    std::exit(2);
  }
  ::close(fd);
  return port;
}

// Node.send: decodes the transfer, streams its tensor into fresh memory.
class SinkNode final : public schema::Node::Server, private kj::TaskSet::ErrorHandler {
 public:
  SinkNode() : tasks_(*this) {}

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

ConnectionOptions tls_options() {
  ConnectionOptions c;
  c.security = make_transport_security(kSecret);
  c.gated = false;
  return c;
}

[[noreturn]] void run_relay(int port_fd) {
  Relay relay("127.0.0.1", 0, Relay::Options{});
  put_port(port_fd, relay.port());
  kj::NEVER_DONE.wait(ThreadIo::get()->wait_scope());
  std::exit(0);
}

[[noreturn]] void run_node(int direct_fd, int relayed_fd, uint16_t relay_port) {
  auto node = std::make_shared<schema::Node::Client>(kj::heap<SinkNode>());
  RpcServer::Options options;
  options.connection = tls_options();
  auto bootstrap = [node](std::shared_ptr<ConnectionTrust>) {
    return capnp::Capability::Client(*node);
  };
  RpcServer direct(bootstrap, "127.0.0.1", 0, options);
  RpcServer relayed(bootstrap, options);
  RelayLink link("127.0.0.1:" + std::to_string(relay_port), 0,
                 [&relayed](kj::Own<kj::AsyncIoStream> stream, const std::string& peer) {
                   relayed.adopt(kj::mv(stream), peer);
                 },
                 nullptr);
  auto linked = link.run().eagerlyEvaluate(nullptr);
  for (int i = 0; i < 1000 && link.port() == 0; ++i) {
    direct.timer().afterDelay(10 * kj::MILLISECONDS).wait(direct.wait_scope());
  }
  if (link.port() == 0) die("the relay did not answer");
  put_port(direct_fd, direct.port());
  put_port(relayed_fd, link.port());
  kj::NEVER_DONE.wait(direct.wait_scope());
  std::exit(0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  size_t mib = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--mib M]\n", argv[0]);
      return 2;
    }
  }
  at::set_num_threads(1);
  int relay_pipe[2], direct_pipe[2], relayed_pipe[2];
  if (::pipe(relay_pipe) != 0 || ::pipe(direct_pipe) != 0 || ::pipe(relayed_pipe) != 0) die("pipe");
  const pid_t relay_pid = ::fork();
  if (relay_pid < 0) die("fork");
  if (relay_pid == 0) run_relay(relay_pipe[1]);
  const uint16_t relay_port = get_port(relay_pipe[0]);
  const pid_t node_pid = ::fork();
  if (node_pid < 0) die("fork");
  if (node_pid == 0) run_node(direct_pipe[1], relayed_pipe[1], relay_port);
  const uint16_t direct_port = get_port(direct_pipe[0]);
  const uint16_t relayed_port = get_port(relayed_pipe[0]);
  std::printf("relay_throughput: %zu MiB a transfer over 127.0.0.1, TLS, %d repetitions; "
              "direct port %u, relayed port %u (relay on %u)\n",
              mib, reps, direct_port, relayed_port, relay_port);

  const size_t bytes = mib << 20;
  at::Tensor tensor = at::rand({static_cast<int64_t>(bytes / 4)});
  RpcClient direct("127.0.0.1", direct_port, tls_options());
  RpcClient relayed("127.0.0.1", relayed_port, tls_options());
  auto& scope = direct.wait_scope();
  auto direct_node = direct.main<schema::Node>();
  auto relayed_node = relayed.main<schema::Node>();
  auto run = [&](schema::Node::Client& node) {
    const double t0 = now_s();
    auto request = node.sendRequest();
    auto encoded = encode_values(request.initTransfer(), {{0, tensor}}, kDefaultInlineLimit);
    auto response = request.send().wait(scope);
    if (!encoded.streamed.empty()) {
      stream_tensors(response.getSink(), std::move(encoded.streamed), kDefaultChunkBytes).wait(scope);
    }
    return bytes / (now_s() - t0) / 1e9;
  };
  run(direct_node);  // warm-up: handshakes, allocator
  run(relayed_node);
  std::vector<double> direct_gbs, relayed_gbs, ratios;
  for (int r = 0; r < reps; ++r) {
    direct_gbs.push_back(run(direct_node));
    relayed_gbs.push_back(run(relayed_node));
    ratios.push_back(relayed_gbs.back() / direct_gbs.back());
    std::printf("rep %2d  direct %6.3f GB/s  relayed %6.3f GB/s  ratio %.2f\n", r + 1,
                direct_gbs.back(), relayed_gbs.back(), ratios.back());
    std::fflush(stdout);
  }
  std::printf("direct   median %.3f GB/s\n", median(direct_gbs));
  std::printf("relayed  median %.3f GB/s\n", median(relayed_gbs));
  std::printf("ratio relayed/direct: median %.2f  worst %.2f\n", median(ratios),
              *std::min_element(ratios.begin(), ratios.end()));
  ::kill(node_pid, SIGTERM);
  ::kill(relay_pid, SIGTERM);
  ::waitpid(node_pid, nullptr, 0);
  ::waitpid(relay_pid, nullptr, 0);
  return 0;
}
