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
#include "libs/base/clock.h"
#include "libs/base/secret.h"
#include "libs/daemon/systemd_notify.h"
#include "libs/daemon/tracker/hardware_probe.h"
#include "libs/tracker/tracker_client.h"
#include "libs/tracker/dial_back.h"
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

// The secret requesters prove ("" when none is configured), warning about what the
// configuration leaves open.
std::string read_shared_secret(const config::DaemonConfig& config) {
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
  return secret;
}

// --listen, else the address the pushed stage was planned at; throws when there is neither.
std::string daemon_listen(const config::DaemonConfig& config, store::NodeStore& store) {
  std::string listen = config.listen;
  if (listen.empty() && store.has_stage()) listen = store.metadata().address;
  if (listen.empty()) {
    throw std::runtime_error("no listen address: give --listen or push a stage first");
  }
  return listen;
}

// The device stages compute on; throws when this LibTorch cannot give it, so that it fails the
// start, not the first job.
c10::Device open_compute_device(const config::DaemonConfig& config) {
  // Before anything touches CUDA (compute_device counts the GPUs): cuBLAS reads it once.
  if (worker::prepare_cuda_environment(config.device)) {
    spdlog::info("CUBLAS_WORKSPACE_CONFIG=:4096:8 (for jobs with [train] deterministic)");
  }
  const c10::Device device = training::compute_device(config.device);
  spdlog::info("{}: stages compute on {}", config.node, device.str());
  if (device.is_cuda()) {
    // What LibTorch will let cuBLAS and cuDNN do with float32 (NVIDIA_TF32_OVERRIDE=0 in the
    // environment overrides both, below LibTorch): the first thing to look at when GPU weights
    // differ from CPU ones by about 1e-3.
    spdlog::info("TF32 allowed in matrix products (cuBLAS): {}, in convolutions (cuDNN): {}",
                 at::globalContext().allowTF32CuBLAS(), at::globalContext().allowTF32CuDNN());
  }
  return device;
}

// The compute thread: an Asio io_context run by a thread of its own, where stages compute as
// eager PyTorch does (eager_numerics.h; the setting is per thread). However run_daemon ends, the
// thread ends first: the destructor lets it finish what it does, then joins it.
class ComputeThread {
 public:
  ComputeThread() : work_(asio::make_work_guard(context_)) {}
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;
  ~ComputeThread() { join(); }

  asio::io_context& context() { return context_; }
  void start() {
    thread_ = std::thread([this]() {
      torch_support::EagerNumerics eager;
      context_.run();
    });
  }
  // Nothing runs on the compute thread after this.
  void join() {
    work_.reset();
    context_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

// SIGTERM and SIGINT stop the daemon (stopped() is fulfilled, once); SIGHUP reopens the log.
// Registered when made, on the compute thread's context, where the handler runs; stopped_by()
// is read on the RPC thread once stopped() is fulfilled. Made on the RPC thread, after its
// event loop.
class StopSignals {
 public:
  StopSignals(ComputeThread& compute, const config::DaemonConfig& config)
      : compute_(compute),
        signals_(compute.context(), SIGTERM, SIGINT, SIGHUP),
        config_(config),
        stop_(kj::newPromiseAndCrossThreadFulfiller<void>()) {}
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The handler runs on the compute thread and refers to this: that thread ends first.
  ~StopSignals() { compute_.join(); }

  void watch() {
    signals_.async_wait([this](const std::error_code& error, int signal) {
      if (error) return;
      if (signal == SIGHUP) {
        spdlog::info("SIGHUP: reopening the log");
        open_log(config_);
        watch();
        return;
      }
      spdlog::info("signal {}: stopping", signal);
      stopped_by_ = signal == SIGINT ? "SIGINT" : "SIGTERM";
      stop_.fulfiller->fulfill();
    });
  }
  kj::Promise<void>& stopped() { return stop_.promise; }
  const std::string& stopped_by() const { return stopped_by_; }
  // On the compute thread.
  void cancel() { signals_.cancel(); }

 private:
  ComputeThread& compute_;
  asio::signal_set signals_;
  const config::DaemonConfig& config_;
  kj::PromiseCrossThreadFulfillerPair<void> stop_;
  std::string stopped_by_ = "SIGTERM";
};

// TLS from --tls-cert/--tls-key when given, and the secret; wipes `secret`.
std::shared_ptr<wire::TransportSecurity> daemon_security(const config::DaemonConfig& config,
                                                         std::string& secret) {
  std::optional<wire::TlsIdentity> own;
  if (!config.tls_cert.empty()) {
    own = wire::load_tls_identity(config.tls_cert, config.tls_key);
    spdlog::info("TLS certificate {} (pin it in the pool file as \"tls_fingerprint\")",
                 own->fingerprint);
  }
  auto security = wire::make_transport_security(secret, config.insecure, std::move(own));
  secret.assign(secret.size(), '\0');
  return security;
}

// Listens on `listen` (behind a relay, on nothing: RelayRoles hands it the relay's sessions).
// Every connection: the TLS handshake, then only the gate until the peer proved the secret; then
// its own NodeEndpoint, under the limits of each kind of message.
// Throws std::runtime_error naming the address when it cannot listen.
kj::Own<wire::RpcServer> serve_node(NodeService& service, const config::DaemonConfig& config,
                                    const std::string& listen,
                                    std::shared_ptr<wire::TransportSecurity> security) {
  NodeService* service_ptr = &service;
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
  try {
    if (!config.relay.empty() && config.relay != config::kRelayAuto) {
      return kj::heap<wire::RpcServer>(gate, options);
    }
    const auto address = listen_address(listen);
    return kj::heap<wire::RpcServer>(gate, address.host(), address.port(), options);
  } catch (const kj::Exception& e) {
    throw std::runtime_error("cannot listen on " + listen + ": " + wire::kj_reason(e));
  }
}

// The relay's two sides (docs/relay.md). Behind NAT (--relay HOST:PORT): no port of this
// daemon's own; the relay holds `listen`'s port on its own host for it, and every connection that
// comes through is served by `server` as one it accepted. With --relay auto, the same from the
// moment hold_on() is called (the tracker could not dial this daemon back), the daemon's own port
// left open (nobody outside reaches it); hold_on() again moves it to another relay, the old link
// dropped (connections it spliced already are the server's and go on). Relaying for others
// (--offer-relay): their ports and sessions, on this thread's loop. Throws std::runtime_error
// naming the flag when either cannot be set up.
class RelayRoles {
 public:
  RelayRoles(const config::DaemonConfig& config, const std::string& listen,
             wire::RpcServer& server,
             std::shared_ptr<const wire::NodeCredentials> credentials)
      : server_(server), credentials_(std::move(credentials)) {
    if (!config.relay.empty() && config.relay != config::kRelayAuto) {
      hold_on(config.relay, listen_address(listen).port(), "--relay");
    }
    if (!config.offer_relay.empty()) {
      const auto at = base::Address::parse(config.offer_relay, "--offer-relay",
                                           base::Address::PortRule::kZeroAllowed);
      wire::Relay::Options options;
      options.on_event = [](const std::string& line) { spdlog::info("{}", line); };
      options.credentials = credentials_;
      try {
        relay_ = kj::heap<wire::Relay>(at.host(), at.port(), options);
      } catch (const kj::Exception& e) {
        throw std::runtime_error("cannot relay on " + config.offer_relay + ": " +
                                 wire::kj_reason(e));
      }
      offered_host_ = at.host();
      spdlog::info("relaying for daemons behind NAT on {}:{}", at.host(), relay_->port());
    }
  }
  // From now on, behind `relay`: it holds `port` for this daemon. `origin` names where the relay
  // came from, for the error.
  void hold_on(const std::string& relay, unsigned port, const std::string& origin) {
    wire::RpcServer* served = &server_;
    run_ = kj::READY_NOW;  // the old link's control loop ends before the link goes
    try {
      link_ = kj::heap<wire::RelayLink>(
          relay, port,
          [served](kj::Own<kj::AsyncIoStream> stream, const std::string& peer) {
            served->adopt(kj::mv(stream), peer);
          },
          [](const std::string& line) { spdlog::info("{}", line); }, credentials_);
    } catch (const kj::Exception& e) {
      throw std::runtime_error(origin + " " + relay + ": " + wire::kj_reason(e));
    }
    run_ = link_->run().eagerlyEvaluate(nullptr);
    relay_address_ = relay;
    host_ = base::Address::parse(relay, origin).host();
    port_ = port;
    lost_since_ = 0;
    held_once_ = false;
  }
  bool behind_relay() const { return link_.get() != nullptr; }
  // How long (seconds, steady clock at `now`) the relay has not held the port, as seen at the
  // calls of this (the caller looks every second): 0 while it holds it.
  double lost_seconds(double now) {
    if (!link_) return 0;
    if (link_->port() != 0) {
      lost_since_ = 0;
      held_once_ = true;
      return 0;
    }
    if (lost_since_ == 0) lost_since_ = now;
    return now - lost_since_;
  }
  // Whether the current relay held the port at some look since hold_on().
  bool held_once() const { return held_once_; }
  const std::string& relay_address() const { return relay_address_; }
  // Where peers reach this daemon: the relay's host behind NAT, else where it listens.
  std::string host(const std::string& listen) const {
    return behind_relay() ? host_ : listen_address(listen).host();
  }
  unsigned port() const { return behind_relay() ? port_ : server_.port(); }
  // Resolves once the relay holds the port (at most `seconds`; then fails naming the relay).
  kj::Promise<void> held(kj::Timer& timer, double seconds) {
    if (link_->port() != 0) return kj::READY_NOW;
    if (seconds <= 0) {
      return wire::kj_failure("the relay " + relay_address_ + " did not hold port " +
                              std::to_string(port_) + " yet");
    }
    return timer.afterDelay(100 * kj::MILLISECONDS).then([this, &timer, seconds]() {
      return held(timer, seconds - 0.1);
    });
  }
  // The relay offered to others, as the tracker passes it on (dial_back.h): on a wildcard host,
  // the host of `reached_host`, this daemon's first registered address. "": none offered.
  std::string offered(const std::string& reached_host) const {
    if (!relay_) return "";
    const std::string own = tracker::own_relay_address(offered_host_, relay_->port());
    return own.rfind(':', 0) == 0 ? reached_host + own : own;
  }

 private:
  wire::RpcServer& server_;
  std::shared_ptr<const wire::NodeCredentials> credentials_;
  kj::Own<wire::RelayLink> link_;
  kj::Promise<void> run_ = kj::READY_NOW;
  std::string relay_address_;
  std::string host_;
  unsigned port_ = 0;
  double lost_since_ = 0;  // steady seconds; 0: held, or not looked at since
  bool held_once_ = false;
  kj::Own<wire::Relay> relay_;
  std::string offered_host_;
};

// What an idle daemon holds (LibTorch and the server, nothing computed): the part of a pushed
// stage's measured peak that this daemon replaces by its own (docs/daemon.md#memory).
void log_memory_budget(NodeService& service) {
  auto& memory = service.job().memory();
  const int64_t baseline = memory.measure_baseline();
  const config::MemoryBudget budget = memory.read().budget;
  spdlog::info("memory budget {} ({}), {} of it this idle daemon's",
               budget.bytes > 0 ? base::format_bytes(static_cast<uint64_t>(budget.bytes))
                                : std::string("unknown"),
               budget.bytes > 0 ? budget.source : std::string("no limit, no /proc/meminfo"),
               base::format_bytes(static_cast<uint64_t>(baseline)));
}

// The daemon in the tracker's pool (--tracker): registered once the port is open, heartbeating
// on this thread's loop until leave(). With --relay auto, each registration follows the
// tracker's dial-back (dial_back.h): reached, the daemon's own addresses; not reached, it holds
// its port on the first relay the tracker names and registers the relay's host; not reached and
// no relay named, it does not register, and asks again every 2 s. Behind a relay taken so, one
// that has not held the port for tracker::kRelayLostSeconds makes it ask the tracker again (a
// dial-back in the same session): the first other relay named is taken, the old one dropped, and
// the new address registered over that session (the tracker takes the move from it); none other
// named, it keeps the relay it has (whose link tries again every 2 s) and asks again after as
// long. Without a tracker, nothing.
class TrackerPresence {
 public:
  TrackerPresence(const config::DaemonConfig& config, const std::string& listen,
                  RelayRoles& relay, const c10::Device& device,
                  std::shared_ptr<wire::TransportSecurity> security, kj::Timer& timer) {
    if (config.tracker.empty()) return;
    auto registration = measure_registration(config.node, relay.host(listen), relay.port(),
                                             config.memory_limit, device);
    const std::string first = registration.addresses.front();
    registration.relay_offered = relay.offered(first.substr(0, first.rfind(':')));
    const auto direct = registration.addresses;
    link_ = kj::heap<tracker::TrackerLink>(config.tracker, std::move(security),
                                           std::move(registration), timer);
    if (config.relay == config::kRelayAuto) {
      tracker::TrackerLink::ReachCheck check;
      check.port = static_cast<uint16_t>(relay.port());
      const std::string tracker_address = config.tracker;
      RelayRoles* roles = &relay;
      kj::Timer* clock = &timer;
      check.decide = [roles, clock, direct, tracker_address, reported = std::make_shared<bool>(false)](
                         const tracker::DialBack& answer)
          -> kj::Promise<std::vector<std::string>> {
        const unsigned port = roles->port();
        auto relayed = [roles, port]() {
          return std::vector<std::string>{roles->host("") + ":" + std::to_string(port)};
        };
        if (roles->behind_relay()) {
          // Lost for long enough: another relay the tracker names, if any (dial_back.h).
          const double lost = roles->lost_seconds(base::now_seconds());
          const auto other =
              lost >= tracker::kRelayLostSeconds
                  ? tracker::relay_to_hold(answer, tracker_address, roles->relay_address())
                  : std::nullopt;
          if (!other) {
            // The relay it has: registered at once when it held the port before (a relay that
            // restarts), else once it holds it.
            if (roles->held_once()) return relayed();
            return roles->held(*clock, 10).then(kj::mv(relayed));
          }
          const std::string was = roles->relay_address();
          roles->hold_on(*other, port, "the relay named by the tracker");
          spdlog::info("relay {} lost for {:.0f} s: holding port {} on the relay {} the tracker "
                       "named instead",
                       was, lost, port, *other);
        } else {
          if (answer.reached) {
            if (!*reported) {
              spdlog::info("reachable: the tracker {} dialled port {} back; registering {}",
                           tracker_address, port, direct.front());
              *reported = true;
            }
            return direct;
          }
          const auto relay = tracker::relay_to_hold(answer, tracker_address);
          if (!relay) {
            return wire::kj_failure("the tracker cannot dial port " + std::to_string(port) +
                                    " back (" + answer.why + ") and names no relay "
                                    "(--relay auto waits for one)");
          }
          roles->hold_on(*relay, port, "the relay named by the tracker");
          spdlog::info("behind NAT: the tracker {} cannot dial port {} back ({}); holding it on "
                       "the relay {} it named",
                       tracker_address, port, answer.why, *relay);
        }
        return roles->held(*clock, 10).then(kj::mv(relayed));
      };
      link_->set_reach_check(std::move(check));
      watch_ = watch_relay(relay, timer).eagerlyEvaluate(nullptr);
    }
    run_ = link_->run().eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::warn("tracker link ended: {}", wire::kj_reason(e));
    });
  }
  // Out of the pool now rather than at the expiry; a tracker that does not answer in 2 s
  // expires this node instead. Then no more heartbeats.
  void leave(kj::WaitScope& wait_scope, kj::Timer& timer) {
    watch_ = kj::READY_NOW;
    if (link_) link_->leave().exclusiveJoin(timer.afterDelay(2 * kj::SECONDS)).wait(wait_scope);
    run_ = kj::READY_NOW;
  }

 private:
  // --relay auto: looks every second whether the relay taken holds the port; lost for
  // kRelayLostSeconds, the tracker is asked again (the decision is the reach check's), and again
  // after as long while it stays lost.
  kj::Promise<void> watch_relay(RelayRoles& relay, kj::Timer& timer) {
    return timer.afterDelay(1 * kj::SECONDS).then([this, &relay, &timer]() {
      const double now = base::now_seconds();
      if (relay.behind_relay() && relay.lost_seconds(now) >= tracker::kRelayLostSeconds &&
          now >= next_ask_) {
        next_ask_ = now + tracker::kRelayLostSeconds;
        link_->ask_again();
      }
      return watch_relay(relay, timer);
    });
  }

  kj::Own<tracker::TrackerLink> link_;
  double next_ask_ = 0;
  kj::Promise<void> run_ = kj::READY_NOW;
  kj::Promise<void> watch_ = kj::READY_NOW;
};

// After a stop signal: the job stops where the others agree, is dropped on the compute thread,
// a benchmark in flight ends, and the compute thread is joined.
void shut_down(NodeService& service, ComputeThread& compute, StopSignals& signals,
               wire::ThreadIo& io) {
  auto& wait_scope = io.wait_scope();
  // A job that trains stops after the same update on every node, as a stop from the requester
  // does (in a plan of several clusters, the requester following it stops it), so that
  // `ravnest resume` continues from the checkpoints written there.
  service.job().stop_agreed_on_shutdown(wait_scope, io.timer(), 20, signals.stopped_by());
  // Let the compute thread finish what it is doing (a stage being written), then drop the job.
  auto done = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto* done_fulfiller = done.fulfiller.get();
  asio::post(compute.context(), [&]() {
    signals.cancel();
    service.abandon_job();
    done_fulfiller->fulfill();
  });
  done.promise.wait(wait_scope);
  // A benchmark in flight ends before its service goes: its thread calls the RPC thread on its
  // way out, so it is waited for here, with the loop running, not in the service's destructor.
  service.bench()
      .finish()
      .exclusiveJoin(io.timer().afterDelay(15 * kj::SECONDS).then([]() {
        spdlog::warn("a benchmark did not end in 15 s; stopping waits for it");
      }))
      .wait(wait_scope);
  // Nothing may run on the compute thread once the service is gone.
  compute.join();
}

}  // namespace

int run_daemon(const config::DaemonConfig& config) {
  // A write past a file size limit (or to a closed socket) fails that write with an error the
  // daemon reports; by default these signals would kill it.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  open_log(config);
  store::NodeStore store(config.data_dir, config.node);
  std::string secret = read_shared_secret(config);
  const std::string listen = daemon_listen(config, store);
  const c10::Device device = open_compute_device(config);

  ComputeThread compute;
  // This thread's KJ event loop, before any promise; it outlives the service and the server.
  auto io = wire::ThreadIo::get();
  // Registered before the port is opened: a SIGTERM that arrives as soon as the daemon accepts
  // connections waits for the handler instead of killing the process.
  StopSignals signals(compute, config);
  compute.start();
  auto security = daemon_security(config, secret);
  // Outlives the server: every connection's endpoint forwards to it.
  auto service = kj::heap<NodeService>(store, security, compute.context(), config.limits,
                                       config.threads, config.device, config.shared_memory,
                                       config.memory_limit);
  service->set_rpc_executor(kj::getCurrentThreadExecutor(), io->timer(), io->low_level());
  auto server = serve_node(*service, config, listen, security);
  RelayRoles relay(config, listen, *server, security->credentials());
  const unsigned port = relay.port();
  const std::string reached_at = relay.host(listen) + ":" + std::to_string(port);
  log_memory_budget(*service);
  signals.watch();
  TrackerPresence tracker(config, listen, relay, device, security, io->timer());

  if (relay.behind_relay()) {
    spdlog::info("behind NAT: listening nowhere; reached through the relay {} at {}", config.relay,
                 reached_at);
  }
  spdlog::info("serving {} on {} (port {}, {}, certificate sha256:{})", config.node,
               relay.behind_relay() ? reached_at : listen, port,
               config.insecure ? "plain TCP" : "TLS",
               security->credentials()->fingerprint().substr(0, 16));
  notify_ready();
  notify_status("serving on " + listen);

  signals.stopped().wait(io->wait_scope());
  tracker.leave(io->wait_scope(), io->timer());
  notify_stopping();
  shut_down(*service, compute, signals, *io);
  spdlog::info("stopped");
  return 0;
}

}  // namespace ravnest::daemon
