#include "libs/tracker/tracker_service.h"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <capnp/capability.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "libs/base/address.h"
#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"
#include "libs/base/secret.h"
#include "libs/tracker/dial_back.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/tracker/tracker_gate.h"
#include "libs/tracker/tracker_state.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/relay.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/transport_security.h"

namespace ravnest::tracker {

namespace {

namespace fs = std::filesystem;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void note_stop_signal(int signal) { g_stop_signal = signal; }

// One probe call carries at most this much (schemas/tracker.capnp, probe).
constexpr uint64_t kMaxProbeBytes = uint64_t{16} << 20;
// Dial-backs under way towards one host at most (each holds a connection attempt up to 3 s):
// a host's connections cannot make the tracker hold more than this many sockets for it.
constexpr int kMaxDialBacksPerHost = 4;

// The membership, its bounds and its file: owned by the event loop's thread.
class TrackerCore {
 public:
  TrackerCore(Bounds bounds, std::string state_path)
      : bounds_(bounds), state_path_(std::move(state_path)) {
    if (fs::exists(state_path_)) {
      membership_ = parse_state(base::read_file(state_path_), state_path_, base::now_seconds());
      spdlog::info("read {}: epoch {}, {} node(s); each has {} s to heartbeat again",
                   state_path_, membership_.epoch.value, membership_.members.size(),
                   bounds_.expiry_seconds);
    }
  }

  const Bounds& bounds() const { return bounds_; }
  Membership& membership() { return membership_; }
  // The tracker's own relay as dialBack names it (dial_back.h); "" when it offers none.
  const std::string& own_relay() const { return own_relay_; }
  void set_own_relay(std::string relay) { own_relay_ = std::move(relay); }
  // Dial-backs under way towards `host`: taken before one starts (false: already the most),
  // given back when it ends.
  bool take_dial_back(const std::string& host) {
    int& n = dial_backs_[host];
    if (n >= kMaxDialBacksPerHost) return false;
    ++n;
    return true;
  }
  void end_dial_back(const std::string& host) {
    if (--dial_backs_[host] <= 0) dial_backs_.erase(host);
  }

  // Each connection's number (TrackerEndpoint), and which one's registration of a name was
  // accepted last: that connection alone may move the name to another address (membership.h).
  uint64_t next_session() { return ++sessions_opened_; }
  bool registered_over(const std::string& name, uint64_t session) const {
    auto it = registered_over_.find(name);
    return it != registered_over_.end() && it->second == session;
  }
  void note_registered(const std::string& name, uint64_t session) {
    registered_over_[name] = session;
    // Only live members' entries are kept: as many as the pool holds, at most.
    for (auto it = registered_over_.begin(); it != registered_over_.end();) {
      it = membership_.members.count(it->first) ? std::next(it) : registered_over_.erase(it);
    }
  }

  // Written before a change is answered: a tracker killed after the answer keeps it.
  void save() const { base::write_file_atomically(state_path_, state_json(membership_)); }

  void expire_now() {
    const auto gone = expire(membership_, base::now_seconds(), bounds_);
    if (gone.empty()) return;
    for (const auto& name : gone) {
      spdlog::info("{} expired (no heartbeat for {} s); epoch {}", name, bounds_.expiry_seconds,
                   membership_.epoch.value);
    }
    save();
  }

  // A refusal's line, at most a burst of 20 and then one a second (the others counted).
  void log_refusal(const std::string& peer, const std::string& why) {
    if (!refusal_lines_.take(base::now_seconds())) {
      ++refusals_left_out_;
      return;
    }
    if (refusals_left_out_ > 0) {
      spdlog::warn("refused {}: {} ({} more refusals not logged)", peer, why, refusals_left_out_);
      refusals_left_out_ = 0;
    } else {
      spdlog::warn("refused {}: {}", peer, why);
    }
  }

 private:
  Bounds bounds_;
  std::string state_path_;
  Membership membership_;
  std::string own_relay_;
  std::map<std::string, int> dial_backs_;  // host -> under way
  uint64_t sessions_opened_ = 0;
  std::map<std::string, uint64_t> registered_over_;  // name -> session
  RateLimit refusal_lines_{20, 1};
  uint64_t refusals_left_out_ = 0;
};

// One connection's Tracker, once its gate opened.
class TrackerEndpoint final : public schema::Tracker::Server {
 public:
  TrackerEndpoint(TrackerCore& core, std::string peer)
      : core_(core), peer_(std::move(peer)), host_(wire::peer_host(peer_)),
        session_(core.next_session()) {}

 protected:
  kj::Promise<void> register_(RegisterContext context) override {
    if (!admit()) return storm();
    const Registration registration = decode_registration(context.getParams().getRegistration());
    core_.expire_now();
    const std::string was = core_.membership().members.count(registration.name)
                                ? core_.membership().members.at(registration.name)
                                      .registration.addresses.front()
                                : std::string();
    const auto outcome = register_member(core_.membership(), registration, host_,
                                         base::now_seconds(), base::seconds_since_epoch(),
                                         core_.bounds(),
                                         core_.registered_over(registration.name, session_));
    if (!outcome.accepted) {
      core_.log_refusal(peer_, outcome.refusal.substr(outcome.refusal.find(' ') + 1));
      return wire::kj_failure(outcome.refusal);
    }
    core_.note_registered(registration.name, session_);
    if (outcome.changed) core_.save();
    if (outcome.joined) {
      const auto& h = registration.hardware;
      spdlog::info("{} joined from {} at {}: {:.2f} GB memory ({}), {} GPU(s), {:.1f} GFLOP/s, "
                   "{:.0f} Mbit/s; epoch {}",
                   registration.name, host_, registration.addresses.front(),
                   static_cast<double>(h.memory_bytes) / 1e9, h.memory_source,
                   h.gpu_memory_bytes.size(), h.gflops, h.bandwidth_mbps,
                   core_.membership().epoch.value);
    } else if (outcome.moved) {
      spdlog::info("{} moved to {} (was {}; registered again over its connection from {}); "
                   "epoch {}",
                   registration.name, registration.addresses.front(), was, host_,
                   core_.membership().epoch.value);
    } else if (outcome.changed) {
      spdlog::info("{} registered again from {} with new figures; epoch {}", registration.name,
                   host_, core_.membership().epoch.value);
    }
    auto results = context.getResults();
    results.setEpoch(core_.membership().epoch.value);
    results.setHeartbeatSeconds(core_.bounds().heartbeat_seconds);
    results.setExpirySeconds(core_.bounds().expiry_seconds);
    return kj::READY_NOW;
  }

  kj::Promise<void> heartbeat(HeartbeatContext context) override {
    if (!admit()) return storm();
    const std::string name = context.getParams().getName();
    auto results = context.getResults();
    results.setKnown(tracker::heartbeat(core_.membership(), name, base::now_seconds()));
    results.setEpoch(core_.membership().epoch.value);
    return kj::READY_NOW;
  }

  kj::Promise<void> pool(PoolContext context) override {
    if (!admit()) return storm();
    core_.expire_now();
    const auto& members = core_.membership().members;
    auto results = context.getResults();
    results.setEpoch(core_.membership().epoch.value);
    results.setExpirySeconds(core_.bounds().expiry_seconds);
    auto list = results.initMembers(static_cast<unsigned>(members.size()));
    const double now = base::now_seconds();
    unsigned i = 0;
    for (const auto& [name, member] : members) {
      encode_member(member, now - member.last_heartbeat, list[i++]);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> leave(LeaveContext context) override {
    if (!admit()) return storm();
    const std::string name = context.getParams().getName();
    auto& members = core_.membership().members;
    const auto found = members.find(name);
    bool left = false;
    if (found != members.end() && found->second.from_host == host_) {
      left = tracker::leave(core_.membership(), name);
      core_.save();
      spdlog::info("{} left (its daemon stopped); epoch {}", name, core_.membership().epoch.value);
    }
    context.getResults().setLeft(left);
    return kj::READY_NOW;
  }

  kj::Promise<void> probe(ProbeContext context) override {
    if (!admit()) return storm();
    if (context.getParams().getPayload().size() > kMaxProbeBytes) {
      return wire::kj_failure("refused: a probe carries at most 16 MiB");
    }
    return kj::READY_NOW;
  }

  // Dials back the caller's own host (never another): a TCP connection opened and closed, no
  // byte sent; at most 3 s. The daemon's server sees a connection that ends before its TLS.
  kj::Promise<void> dialBack(DialBackContext context) override {
    if (!admit()) return storm();
    const unsigned port = context.getParams().getPort();
    if (port == 0) return wire::kj_failure("refused: dialBack: port 0");
    if (!core_.take_dial_back(host_)) {
      const std::string why = std::to_string(kMaxDialBacksPerHost) + " dial-backs to " + host_ +
                              " under way already";
      core_.log_refusal(peer_, why);
      return wire::kj_failure("refused: " + why);
    }
    auto io = wire::ThreadIo::get();
    auto& timer = io->timer();
    auto reached = io->network()
                       .parseAddress(host_, port)
                       .then([](kj::Own<kj::NetworkAddress> address) {
                         return address->connect().attach(kj::mv(address));
                       })
                       .then([](kj::Own<kj::AsyncIoStream>) { return std::string(); },
                             [](kj::Exception&& e) { return wire::kj_reason(e); });
    auto in_time = timer.afterDelay(3 * kj::SECONDS).then([]() {
      return std::string("no connection within 3 s");
    });
    return reached.exclusiveJoin(kj::mv(in_time))
        .then([this, context, port](std::string why) mutable {
          auto results = context.getResults();
          results.setReached(why.empty());
          results.setWhy(why);
          core_.expire_now();
          const auto relays = relays_offered(core_.membership(), core_.own_relay());
          auto list = results.initRelays(static_cast<unsigned>(relays.size()));
          for (unsigned i = 0; i < relays.size(); ++i) list.set(i, relays[i]);
          spdlog::debug("dialled {}:{} back: {}", host_, port,
                       why.empty() ? std::string("reached") : "not reached (" + why + ")");
        })
        .attach(kj::mv(io), kj::defer([core = &core_, host = host_]() { core->end_dial_back(host); }));
  }

 private:
  bool admit() {
    if (calls_.take(base::now_seconds())) return true;
    if (!storm_reported_) core_.log_refusal(peer_, "too many calls (more than 5 a second)");
    storm_reported_ = true;
    return false;
  }
  static kj::Promise<void> storm() { return wire::kj_failure("refused: too many calls"); }

  TrackerCore& core_;
  std::string peer_;
  std::string host_;
  uint64_t session_;
  RateLimit calls_{20, 5};
  bool storm_reported_ = false;
};

void open_log(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("ravnest-tracker");
  spdlog::drop("ravnest-tracker");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ tracker: %v");
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace

int run_tracker(const TrackerOptions& options, const std::function<void(unsigned)>& on_listening) {
  try {
    check_bounds(options.bounds);
  } catch (const std::invalid_argument& e) {
    char given[160];
    std::snprintf(given, sizeof given,
                  "--heartbeat-seconds %g, --expiry-seconds %g, --max-nodes %zu, "
                  "--max-nodes-per-host %zu: ",
                  options.bounds.heartbeat_seconds, options.bounds.expiry_seconds,
                  options.bounds.max_members, options.bounds.max_per_host);
    throw std::runtime_error(given + std::string(e.what()));
  }
  std::string why;
  const auto address = base::Address::try_parse(options.listen,
                                                base::Address::PortRule::kZeroAllowed, &why);
  if (!address) throw std::runtime_error("--listen " + options.listen + ": " + why);
  if (options.state_dir.empty()) throw std::runtime_error("--state-dir: must not be empty");
  std::error_code ec;
  fs::create_directories(options.state_dir, ec);
  if (ec) {
    throw std::runtime_error("--state-dir " + options.state_dir + ": cannot create it: " +
                             ec.message());
  }
  open_log(options.log_level);
  std::string secret;
  if (!options.secret_file.empty()) {
    bool readable_by_others = false;
    secret = base::read_secret(options.secret_file, &readable_by_others);
    if (readable_by_others) {
      spdlog::warn("{} is readable by other users; chmod 600 it", options.secret_file);
    }
  } else {
    spdlog::warn("no shared secret configured: every daemon and requester without one is "
                 "trusted");
  }
  TrackerCore core(options.bounds, (fs::path(options.state_dir) / kStateFileName).string());

  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = note_stop_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_term {}, old_int {};
  sigaction(SIGTERM, &action, &old_term);
  sigaction(SIGINT, &action, &old_int);
  struct Restore {
    struct sigaction term, intr;
    ~Restore() {
      sigaction(SIGTERM, &term, nullptr);
      sigaction(SIGINT, &intr, nullptr);
    }
  } restore{old_term, old_int};

  auto io = wire::ThreadIo::get();
  auto security = wire::make_transport_security(secret, options.insecure);
  secret.assign(secret.size(), '\0');
  wire::RpcServer::Options server_options;
  server_options.connection.security = security;
  server_options.connection.max_message_bytes = kMaxProbeBytes + (uint64_t{1} << 20);
  server_options.limits.message_bytes = server_options.connection.max_message_bytes;
  server_options.timeouts.message_grace = 30 * kj::SECONDS;
  // A daemon's connection carries a heartbeat every heartbeat_seconds; one silent for several
  // expiries is gone.
  server_options.timeouts.idle =
      static_cast<int64_t>(options.bounds.expiry_seconds * 4) * kj::SECONDS;
  server_options.max_connections = options.max_connections;
  server_options.max_connections_per_peer = options.max_connections_per_host;
  server_options.on_refused = [&core](const std::string& peer, const std::string& why) {
    core.log_refusal(peer, why);
  };
  auto credentials = security->credentials();
  auto* core_ptr = &core;
  auto gate = [credentials, core_ptr](std::shared_ptr<wire::ConnectionTrust> trust) {
    const std::string peer = trust->peer;
    schema::Tracker::Client tracker = kj::heap<TrackerEndpoint>(*core_ptr, peer);
    return capnp::Capability::Client(kj::heap<TrackerGateServer>(
        credentials, kj::mv(tracker), std::move(trust),
        [core_ptr, peer](const std::string& why) { core_ptr->log_refusal(peer, why); }));
  };
  kj::Own<wire::RpcServer> server;
  try {
    server = kj::heap<wire::RpcServer>(gate, address->host(), address->port(), server_options);
  } catch (const kj::Exception& e) {
    throw std::runtime_error("cannot listen on " + options.listen + ": " + wire::kj_reason(e));
  }
  spdlog::info("tracker serving on {} (port {}, {}, certificate sha256:{}); heartbeat {} s, "
               "expiry {} s, at most {} nodes, {} a host; state in {}",
               options.listen, server->port(), options.insecure ? "plain TCP" : "TLS",
               credentials->fingerprint().substr(0, 16), options.bounds.heartbeat_seconds,
               options.bounds.expiry_seconds, options.bounds.max_members,
               options.bounds.max_per_host, options.state_dir);
  // Relaying for daemons behind NAT (docs/relay.md), on this loop.
  kj::Own<wire::Relay> relay;
  if (!options.offer_relay.empty()) {
    std::string relay_why;
    const auto at = base::Address::try_parse(options.offer_relay,
                                             base::Address::PortRule::kZeroAllowed, &relay_why);
    if (!at) throw std::runtime_error("--offer-relay " + options.offer_relay + ": " + relay_why);
    wire::Relay::Options relay_options;
    relay_options.on_event = [](const std::string& line) { spdlog::info("{}", line); };
    relay_options.credentials = credentials;
    try {
      relay = kj::heap<wire::Relay>(at->host(), at->port(), relay_options);
    } catch (const kj::Exception& e) {
      throw std::runtime_error("cannot relay on " + options.offer_relay + ": " +
                               wire::kj_reason(e));
    }
    spdlog::info("relaying for daemons behind NAT on {}:{}", at->host(), relay->port());
    core.set_own_relay(own_relay_address(at->host(), relay->port()));
  }
  if (on_listening) on_listening(server->port());
  auto& wait_scope = io->wait_scope();
  double last_tick = base::now_seconds();
  while (g_stop_signal == 0) {
    io->timer().afterDelay(100 * kj::MILLISECONDS).wait(wait_scope);
    const double now = base::now_seconds();
    if (now - last_tick >= 1) {
      core.expire_now();
      last_tick = now;
    }
  }
  spdlog::info("signal {}: stopping ({} node(s) kept in the state file)",
               static_cast<int>(g_stop_signal), core.membership().members.size());
  return 0;
}

}  // namespace ravnest::tracker
