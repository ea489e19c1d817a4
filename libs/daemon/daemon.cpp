#include "libs/daemon/daemon.h"

#include <csignal>
#include <thread>

#include <ATen/Context.h>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <kj/async-io.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "libs/base/address.h"
#include "libs/base/byte_size.h"
#include "libs/base/secret.h"
#include "libs/daemon/systemd_notify.h"
#include "libs/daemon/tracker/hardware_probe.h"
#include "libs/tracker/tracker_client.h"
#include "libs/wire/relay.h"
#include "libs/wire/relay_link.h"
#include "libs/worker/compute_device.h"
#include "libs/daemon/rpc/endpoint_limits.h"
#include "libs/daemon/node_endpoint.h"
#include "libs/daemon/node_service.h"
#include "libs/store/node_store.h"
#include "libs/torch_support/eager_numerics.h"
#include "libs/wire/gate.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/transport_security.h"

namespace ravnest::daemon {

namespace {

void open_log(const config::DaemonConfig& config) {
  std::shared_ptr<spdlog::logger> logger;
  if (config.log_file.empty()) {
    logger = spdlog::stderr_color_mt("ravnestd");
  } else {
    logger = spdlog::basic_logger_mt("ravnestd", config.log_file);
  }
  spdlog::drop("ravnestd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ " + config.node + ": %v");
  spdlog::flush_on(spdlog::level::info);
}

// "host:port" or "[v6]:port" (port 0: a free one); throws std::runtime_error naming it otherwise.
base::Address listen_address(const std::string& listen) {
  auto address = base::Address::try_parse(listen, base::Address::PortRule::kZeroAllowed);
  if (!address) throw std::runtime_error("cannot listen on " + listen + ": not host:port");
  return *address;
}

}  // namespace

int run_daemon(const config::DaemonConfig& config) {
  // A write past a file size limit (or to a closed socket) fails that write with an error the
  // daemon reports; by default these signals would kill it.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  open_log(config);
  store::NodeStore store(config.data_dir, config.node);
  std::string secret;
  if (!config.secret_file.empty()) {
    bool readable_by_others = false;
    secret = base::read_secret(config.secret_file, &readable_by_others);
    if (readable_by_others) {
      spdlog::warn("{} is readable by other users; chmod 600 it", config.secret_file);
    }
  } else {
    spdlog::warn("no shared secret configured: every requester without one is trusted");
  }
  if (config.insecure) {
    spdlog::warn("--insecure: TLS is off; everything but the secret travels in clear and "
                 "unauthenticated. For benchmarks only");
  }
  std::string listen = config.listen;
  if (listen.empty() && store.has_stage()) listen = store.metadata().address;
  if (listen.empty()) {
    throw std::runtime_error("no listen address: give --listen or push a stage first");
  }

  // Before anything touches CUDA (compute_device counts the GPUs): cuBLAS reads it once.
  if (worker::prepare_cuda_environment(config.device)) {
    spdlog::info("CUBLAS_WORKSPACE_CONFIG=:4096:8 (for jobs with [train] deterministic)");
  }
  // A device this LibTorch cannot give fails the start, not the first job.
  const c10::Device device = training::compute_device(config.device);
  spdlog::info("{}: stages compute on {}", config.node, device.str());
  if (device.is_cuda()) {
    // What LibTorch will let cuBLAS and cuDNN do with float32 (NVIDIA_TF32_OVERRIDE=0 in the
    // environment overrides both, below LibTorch): the first thing to look at when GPU weights
    // differ from CPU ones by about 1e-3.
    spdlog::info("TF32 allowed in matrix products (cuBLAS): {}, in convolutions (cuDNN): {}",
                 at::globalContext().allowTF32CuBLAS(), at::globalContext().allowTF32CuDNN());
  }

  asio::io_context compute;
  auto work = asio::make_work_guard(compute);
  // Registered before the port is opened: a SIGTERM that arrives as soon as the daemon accepts
  // connections waits for the handler below instead of killing the process.
  asio::signal_set signals(compute, SIGTERM, SIGINT, SIGHUP);
  // Stages compute as eager PyTorch does (eager_numerics.h); the setting is per thread.
  std::thread compute_thread([&compute]() {
    torch_support::EagerNumerics eager;
    compute.run();
  });
  // However this function ends, the compute thread ends first.
  struct Joiner {
    asio::io_context& compute;
    std::thread& thread;
    decltype(work)& guard;
    ~Joiner() {
      guard.reset();
      compute.stop();
      if (thread.joinable()) thread.join();
    }
  } joiner{compute, compute_thread, work};

  // This thread's KJ event loop, before any promise; it outlives the service and the server.
  auto io = wire::ThreadIo::get();
  std::optional<wire::TlsIdentity> own;
  if (!config.tls_cert.empty()) {
    own = wire::load_tls_identity(config.tls_cert, config.tls_key);
    spdlog::info("TLS certificate {} (pin it in the pool file as \"tls_fingerprint\")",
                 own->fingerprint);
  }
  auto security = wire::make_transport_security(secret, config.insecure, std::move(own));
  secret.assign(secret.size(), '\0');
  // Outlives the server: every connection's endpoint forwards to it.
  auto service = kj::heap<NodeService>(store, security, compute, config.limits, config.threads,
                                    config.device, config.shared_memory, config.memory_limit);
  NodeService* service_ptr = service.get();
  service_ptr->set_rpc_executor(kj::getCurrentThreadExecutor(), io->timer(), io->low_level());

  // Every connection: the TLS handshake, then only the gate until the peer proved the secret;
  // then its own NodeEndpoint, under the limits of each kind of message.
  wire::RpcServer::Options options = endpoint_options(config.limits);
  options.connection.security = security;
  options.on_refused = [](const std::string& peer, const std::string& why) {
    spdlog::warn("refused {}: {}", peer, why);
  };
  // A ring's data channel (wire/data_channel.h) belongs to the ring member that offered its token.
  options.on_data_channel = [service_ptr](const std::string& token, int fd,
                                          const std::string& peer) {
    return service_ptr->ring().accept_channel(token, fd, peer);
  };
  auto credentials = security->credentials();
  auto gate = [credentials, service_ptr](std::shared_ptr<wire::ConnectionTrust> trust) {
    const std::string peer = trust->peer;
    schema::Node::Client node = kj::heap<NodeEndpoint>(*service_ptr, peer);
    return capnp::Capability::Client(kj::heap<wire::GateServer>(
        credentials, kj::mv(node), std::move(trust),
        [peer](const std::string& why) { spdlog::warn("refused {}: {}", peer, why); }));
  };
  kj::Own<wire::RpcServer> server;
  // Behind NAT (docs/relay.md): no port of its own; every connection comes through the relay,
  // which holds `listen`'s port on its own host for this node, and is served as one accepted.
  kj::Own<wire::RelayLink> relay_link;
  kj::Promise<void> relay_run = kj::READY_NOW;
  // Relaying for others: their ports and sessions, on this loop.
  kj::Own<wire::Relay> relay;
  std::string reached_at = listen;
  try {
    const auto address = listen_address(listen);
    if (config.relay.empty()) {
      server = kj::heap<wire::RpcServer>(gate, address.host(), address.port(), options);
    } else {
      server = kj::heap<wire::RpcServer>(gate, options);
      wire::RpcServer* served = server.get();
      relay_link = kj::heap<wire::RelayLink>(
          config.relay, address.port(),
          [served](kj::Own<kj::AsyncIoStream> stream, const std::string& peer) {
            served->adopt(kj::mv(stream), peer);
          },
          [](const std::string& line) { spdlog::info("{}", line); });
      relay_run = relay_link->run().eagerlyEvaluate(nullptr);
      reached_at = base::Address::parse(config.relay, "--relay").host() + ":" +
                   std::to_string(address.port());
    }
  } catch (const kj::Exception& e) {
    throw std::runtime_error("cannot listen on " + listen + ": " + wire::kj_reason(e));
  }
  if (!config.offer_relay.empty()) {
    const auto at = base::Address::parse(config.offer_relay, "--offer-relay",
                                         base::Address::PortRule::kZeroAllowed);
    wire::Relay::Options relay_options;
    relay_options.on_event = [](const std::string& line) { spdlog::info("{}", line); };
    try {
      relay = kj::heap<wire::Relay>(at.host(), at.port(), relay_options);
    } catch (const kj::Exception& e) {
      throw std::runtime_error("cannot relay on " + config.offer_relay + ": " + wire::kj_reason(e));
    }
    spdlog::info("relaying for daemons behind NAT on {}:{}", at.host(), relay->port());
  }
  auto& wait_scope = io->wait_scope();
  const unsigned port = config.relay.empty() ? server->port() : listen_address(listen).port();
  {
    // What an idle daemon holds (LibTorch and the server, nothing computed): the part of a pushed
    // stage's measured peak that this daemon replaces by its own (docs/daemon.md#memory).
    auto& memory = service_ptr->job().memory();
    const int64_t baseline = memory.measure_baseline();
    const config::MemoryBudget budget = memory.read().budget;
    spdlog::info("memory budget {} ({}), {} of it this idle daemon's",
                 budget.bytes > 0 ? base::format_bytes(static_cast<uint64_t>(budget.bytes))
                                  : std::string("unknown"),
                 budget.bytes > 0 ? budget.source : std::string("no limit, no /proc/meminfo"),
                 base::format_bytes(static_cast<uint64_t>(baseline)));
  }

  auto shutdown = kj::newPromiseAndCrossThreadFulfiller<void>();
  std::string stopped_by = "SIGTERM";  // set by the handler, read once `shutdown` is fulfilled
  auto* fulfiller = shutdown.fulfiller.get();
  std::function<void(const std::error_code&, int)> on_signal = [&](const std::error_code& error,
                                                                    int signal) {
    if (error) return;
    if (signal == SIGHUP) {
      spdlog::info("SIGHUP: reopening the log");
      open_log(config);
      signals.async_wait(on_signal);
      return;
    }
    spdlog::info("signal {}: stopping", signal);
    stopped_by = signal == SIGINT ? "SIGINT" : "SIGTERM";
    fulfiller->fulfill();
  };
  signals.async_wait(on_signal);

  // Registered with the tracker once the port is open, heartbeating on this loop until the end.
  kj::Own<tracker::TrackerLink> tracker_link;
  kj::Promise<void> tracker_run = kj::READY_NOW;
  if (!config.tracker.empty()) {
    // Behind a relay, peers reach it at the relay's host.
    const std::string host = config.relay.empty()
                                 ? listen_address(listen).host()
                                 : base::Address::parse(config.relay, "--relay").host();
    auto registration = measure_registration(config.node, host, port,
                                             config.memory_limit, device);
    tracker_link = kj::heap<tracker::TrackerLink>(config.tracker, security,
                                                  std::move(registration), io->timer());
    tracker_run = tracker_link->run().eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::warn("tracker link ended: {}", wire::kj_reason(e));
    });
  }

  if (relay_link) {
    spdlog::info("behind NAT: listening nowhere; reached through the relay {} at {}", config.relay,
                 reached_at);
  }
  spdlog::info("serving {} on {} (port {}, {}, certificate sha256:{})", config.node, reached_at, port,
               config.insecure ? "plain TCP" : "TLS", credentials->fingerprint().substr(0, 16));
  notify_ready();
  notify_status("serving on " + listen);

  shutdown.promise.wait(wait_scope);
  if (tracker_link) {
    // Out of the pool now rather than at the expiry; a tracker that does not answer in 2 s
    // expires this node instead.
    tracker_link->leave().exclusiveJoin(io->timer().afterDelay(2 * kj::SECONDS)).wait(wait_scope);
  }
  tracker_run = kj::READY_NOW;  // no more heartbeats
  notify_stopping();
  // A job that trains stops after the same update on every node, as a stop from the requester
  // does (in a plan of several clusters, the requester following it stops it), so that
  // `ravnest resume` continues from the checkpoints written there.
  service_ptr->job().stop_agreed_on_shutdown(wait_scope, io->timer(), 20, stopped_by);
  // Let the compute thread finish what it is doing (a stage being written), then drop the job.
  auto done = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto* done_fulfiller = done.fulfiller.get();
  asio::post(compute, [&]() {
    signals.cancel();
    service_ptr->abandon_job();
    done_fulfiller->fulfill();
  });
  done.promise.wait(wait_scope);
  // A benchmark in flight ends before its service goes: its thread calls the RPC thread on its
  // way out, so it is waited for here, with the loop running, not in the service's destructor.
  service_ptr->bench()
      .finish()
      .exclusiveJoin(io->timer().afterDelay(15 * kj::SECONDS).then([]() {
        spdlog::warn("a benchmark did not end in 15 s; stopping waits for it");
      }))
      .wait(wait_scope);
  // Nothing may run on the compute thread once the service is gone.
  work.reset();
  compute.stop();
  compute_thread.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace ravnest::daemon
