// The tracker end to end on 127.0.0.1 (docs/tracker.md): `ravnest tracker` and 3 ravnestd
// --tracker processes. The daemons register what they measured and heartbeat; a daemon stopped
// past the expiry leaves and registers again when it runs again; a daemon killed with -9 expires;
// a tracker killed with -9 starts again with the pool it had and the daemons register again; a
// daemon stopped with SIGTERM leaves at once; a wrong secret is refused in one line; a flood of
// fake registrations and heartbeats from one connection leaves the pool bounded; `ravnest pool
// --tracker` writes a pool file, `ravnest clusterize --tracker` plans on it, the dashboard shows
// the pool. Every process is bounded in time and stopped at the end.
#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "libs/local/local_daemons.h"
#include "libs/config/pool/node_pool.h"
#include "libs/tracker/tracker_client.h"
#include "libs/tracker/tracker_gate.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/thread_io.h"
#include "tests/support/child_process.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string ravnest_binary() { return test::binary_dir() + "/apps/ravnest/ravnest"; }

// The pool as the requester reads it; empty on failure (the reason in `error`).
tracker::PoolSnapshot pool_of(const std::string& address, const std::string& secret,
                              std::string* error = nullptr) {
  try {
    return tracker::fetch_pool(address, wire::make_transport_security(secret), 5);
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return {};
  }
}

// Polls until `pred` holds; false after `seconds`.
template <typename Pred>
bool eventually(double seconds, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return pred();
}

std::vector<std::string> names(const tracker::PoolSnapshot& pool) {
  std::vector<std::string> out;
  for (const auto& m : pool.members) out.push_back(m.registration.name);
  return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// One connection to the tracker at `address` with its gate opened by `secret`, on this thread's
// event loop (`io`), for calls the tracker's own clients never make.
struct TrackerConnection {
  static wire::ConnectionOptions options_of(std::shared_ptr<wire::TransportSecurity> security) {
    wire::ConnectionOptions options;
    options.security = std::move(security);
    return options;
  }
  TrackerConnection(const std::string& address, const std::string& secret)
      : io(wire::ThreadIo::get()),
        security(wire::make_transport_security(secret)),
        client(address, options_of(security)),
        tracker(tracker::open_tracker_gate(client.main<schema::TrackerGate>(),
                                           security->credentials(), client.trust())) {}
  kj::Own<wire::ThreadIo> io;
  std::shared_ptr<wire::TransportSecurity> security;
  wire::RpcClient client;
  schema::Tracker::Client tracker;
};

}  // namespace

TEST_CASE("daemons register with a tracker, heartbeat, expire, and survive its restart") {
  test::TempDir dir;
  const std::string secret = "tracker test secret, long enough and random enough 4f9a";
  test::write_text(dir / "secret", secret + "\n");
  fs::permissions(dir / "secret", fs::perms::owner_read | fs::perms::owner_write);
  const int port = local::free_loopback_port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::vector<std::string> tracker_args = {
      ravnest_binary(), "tracker", "--listen", address, "--state-dir", (dir / "state").string(),
      "--secret-file", (dir / "secret").string(), "--heartbeat-seconds", "1",
      "--expiry-seconds", "3", "--max-nodes-per-host", "8"};
  auto tracker = std::make_unique<test::ChildProcess>(tracker_args, (dir / "tracker.log").string());

  local::LocalDaemons daemons(test::binary_dir() + "/apps/ravnestd/ravnestd", dir.path().string(),
                              (dir / "secret").string(), {"node_0", "node_1", "node_2"});
  for (size_t i = 0; i < 3; ++i) {
    // node_1 declares more memory than any test machine has: the measured figure wins.
    std::vector<std::string> flags = {"--threads", "1", "--tracker", address};
    if (i == 1) flags.insert(flags.end(), {"--memory-limit", "900TB"});
    daemons.set_flags(i, flags);
  }
  daemons.start_all();

  // Registration: all three, with what they measured.
  REQUIRE(eventually(20, [&] { return pool_of(address, secret).members.size() == 3; }));
  auto pool = pool_of(address, secret);
  CHECK(names(pool) == std::vector<std::string>{"node_0", "node_1", "node_2"});
  for (size_t i = 0; i < 3; ++i) {
    const auto& m = pool.members[i];
    CHECK(m.registration.addresses.front() == daemons.address(i));
    CHECK(m.registration.hardware.memory_bytes > 0);
    CHECK(m.registration.hardware.gflops > 0);
    CHECK(m.registration.hardware.bandwidth_mbps > 0);
    CHECK(m.registration.hardware.gpu_memory_bytes.empty());  // CPU daemons
  }
  const auto& declared = pool.members[1].registration.hardware;
  CHECK(declared.declared_memory_bytes == 900'000'000'000'000ull);
  CHECK(declared.memory_bytes < declared.declared_memory_bytes);
  CHECK(test::read_text(daemons.log_path(1)).find("is more than this host has now") !=
        std::string::npos);

  // The pool file: Ravnest's format with the measured figures; clusterize plans on it.
  const auto pool_file = (dir / "nodes" / "node_configs.json").string();
  auto written = test::run_command(ravnest_binary() + " pool --tracker " + address +
                                       " --secret-file " + (dir / "secret").string() +
                                       " --write " + pool_file, 60);
  INFO("pool: " << written.out << written.err);
  REQUIRE(written.exit_code == 0);
  const auto nodes = config::load_node_pool(pool_file);
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[2].address == daemons.address(2));
  CHECK(nodes[2].gflops > 0);
  auto status = test::run_command(ravnest_binary() + " status --tracker " + address +
                                      " --secret-file " + (dir / "secret").string(), 60);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find("3 node(s) live") != std::string::npos);
  auto planned = test::run_command(
      ravnest_binary() + " clusterize --tracker " + address + " --secret-file " +
          (dir / "secret").string() + " " + test::models_dir() + "/small_cnn.pt --nodes " +
          (dir / "plan_pool.json").string() + " --out " + (dir / "plan").string() +
          " --example-input 4x1x8x8:float32 --no-memory-probe", 300);
  INFO("clusterize: " << planned.out << planned.err);
  CHECK(planned.exit_code == 0);
  CHECK(fs::exists(dir / "plan" / "plan.json"));

  // The dashboard shows the live pool beside the plan.
  {
    const int dashboard_port = local::free_loopback_port();
    test::ChildProcess dashboard({ravnest_binary(), "dashboard", "--plan", (dir / "plan").string(),
                            "--secret-file", (dir / "secret").string(), "--tracker", address,
                            "--listen", "127.0.0.1:" + std::to_string(dashboard_port)},
                           (dir / "dashboard.log").string());
    std::string state;
    CHECK(eventually(20, [&] {
      auto got = test::run_command("curl -s --max-time 5 http://127.0.0.1:" +
                                       std::to_string(dashboard_port) + "/api/state", 10);
      state = got.out;
      return got.exit_code == 0 && state.find("\"tracker\"") != std::string::npos;
    }));
    INFO(state);
    const auto parsed = nlohmann::json::parse(state, nullptr, false);
    REQUIRE(parsed.is_object());
    CHECK(parsed["tracker"]["nodes"].size() == 3);
    CHECK(parsed["tracker"]["nodes"][0]["name"] == "node_0");
  }

  // A wrong secret: one line, refused; the tracker logs it and serves on.
  test::write_text(dir / "wrong", "not the secret at all, but long enough 1234\n");
  fs::permissions(dir / "wrong", fs::perms::owner_read | fs::perms::owner_write);
  auto refused = test::run_command(ravnest_binary() + " status --tracker " + address +
                                       " --secret-file " + (dir / "wrong").string(), 60);
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("refused: wrong secret") != std::string::npos);
  CHECK(count_of(refused.err, "\n") == 1);
  CHECK(eventually(5, [&] {
    return test::read_text(dir / "tracker.log").find("wrong secret") != std::string::npos;
  }));

  // A flood from one connection: 2,000 fake registrations and 2,000 heartbeats. The pool stays
  // within 8 a host (3 real, at most 5 fakes); most calls are refused as too many.
  {
    TrackerConnection connection(address, secret);
    auto& io = connection.io;
    auto& gate = connection.tracker;
    size_t accepted = 0, too_many = 0, per_host = 0;
    kj::Vector<kj::Promise<void>> calls;
    for (int i = 0; i < 2000; ++i) {
      auto request = gate.registerRequest();
      tracker::Registration fake;
      fake.name = "node_" + std::to_string(100 + i);
      fake.addresses = {"127.0.0.1:" + std::to_string(20000 + i)};
      fake.hardware.memory_bytes = 1'000'000'000'000;
      fake.hardware.bandwidth_mbps = 100000;
      tracker::encode_registration(fake, request.initRegistration());
      calls.add(request.send().then([&](auto&&) { ++accepted; },
                                    [&](kj::Exception&& e) {
                                      const auto why = wire::kj_reason(e);
                                      if (why.find("too many calls") != std::string::npos) ++too_many;
                                      if (why.find("a host") != std::string::npos) ++per_host;
                                    }));
      auto beat = gate.heartbeatRequest();
      beat.setName("node_0");
      calls.add(beat.send().ignoreResult().catch_([](kj::Exception&&) {}));
    }
    kj::joinPromises(calls.releaseAsArray()).wait(io->wait_scope());
    CHECK(accepted <= 5);
    CHECK(too_many + per_host + accepted == 2000);
    CHECK(too_many > 1900);
  }
  // Dial-backs (`--relay auto`): the caller's own host only, at most 4 under way towards it.
  // The port's listener never accepts and its backlog is full after one connection: the
  // tracker's further attempts wait until their 3 s end.
  {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
    REQUIRE(::listen(listener, 0) == 0);
    socklen_t length = sizeof(at);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &length) == 0);
    TrackerConnection connection(address, secret);
    auto& io = connection.io;
    auto& gate = connection.tracker;
    size_t answered = 0, under_way = 0, other = 0;
    std::string answers;
    kj::Vector<kj::Promise<void>> calls;
    for (int i = 0; i < 12; ++i) {
      auto request = gate.dialBackRequest();
      request.setPort(ntohs(at.sin_port));
      calls.add(request.send().then(
          [&](capnp::Response<schema::Tracker::DialBackResults>&& answer) {
            ++answered;
            answers += std::string(answer.getReached() ? "reached" : "not reached: ") +
                       answer.getWhy().cStr() + "\n";
          },
          [&](kj::Exception&& e) {
            const auto why = wire::kj_reason(e);
            if (why == "refused: 4 dial-backs to 127.0.0.1 under way already") {
              ++under_way;
            } else {
              ++other;
              answers += why + "\n";
            }
          }));
    }
    kj::joinPromises(calls.releaseAsArray()).wait(io->wait_scope());
    ::close(listener);
    INFO(answers);
    CHECK(other == 0);
    CHECK(answered + under_way == 12);
    CHECK(answered <= 5);  // 4 at once, and one more should the first end before the last call
    CHECK(under_way >= 7);
    CHECK(answers.find("no connection within 3 s") != std::string::npos);
    // Port 0 is no port.
    auto zero = gate.dialBackRequest();
    std::string why;
    try {
      zero.send().wait(io->wait_scope());
    } catch (const kj::Exception& e) {
      why = wire::kj_reason(e);
    }
    CHECK(why == "refused: dialBack: port 0");
  }
  pool = pool_of(address, secret);
  CHECK(pool.members.size() <= 8);
  // Its memory after the flood: `ravnest tracker` became ravnest-tracker, without LibTorch (about
  // 28 MB at its peak here; `ravnest` itself holds 160 MB of LibTorch's).
  CHECK(fs::read_symlink("/proc/" + std::to_string(tracker->pid()) + "/exe").filename() ==
        "ravnest-tracker");
  const std::string status_text =
      test::read_text("/proc/" + std::to_string(tracker->pid()) + "/status");
  const auto peak_at = status_text.find("VmHWM:");
  REQUIRE(peak_at != std::string::npos);
  const long peak_kib = std::stol(status_text.substr(peak_at + 6));
  INFO("tracker peak " << peak_kib << " KiB");
  CHECK(peak_kib < 96 * 1024);
  const std::string log = test::read_text(dir / "tracker.log");
  CHECK(count_of(log, "too many calls") <= 2);  // logged once, not 2,000 times

  // node_2 stopped (SIGSTOP) past the expiry: it leaves; running again, its next heartbeat is
  // not known and it registers again over the same connection.
  auto has = [&](const std::string& name) {
    const auto now = names(pool_of(address, secret));
    return std::find(now.begin(), now.end(), name) != now.end();
  };
  daemons.signal(2, SIGSTOP);
  CHECK(eventually(10, [&] { return !has("node_2"); }));
  daemons.signal(2, SIGCONT);
  CHECK(eventually(10, [&] { return has("node_2"); }));
  CHECK(test::read_text(daemons.log_path(2)).find("no longer knows node_2") != std::string::npos);

  // kill -9 of node_2: it expires (3 s without a heartbeat); the others stay.
  daemons.signal(2, SIGKILL);
  CHECK(eventually(10, [&] {
    const auto now = names(pool_of(address, secret));
    return std::find(now.begin(), now.end(), "node_2") == now.end() &&
           std::find(now.begin(), now.end(), "node_0") != now.end() &&
           std::find(now.begin(), now.end(), "node_1") != now.end();
  }));
  const auto before_restart = pool_of(address, secret).epoch;

  // kill -9 of the tracker, then a new one on the same state: the pool is there at once, and the
  // daemons register again over new connections.
  tracker->kill(SIGKILL);
  tracker = std::make_unique<test::ChildProcess>(tracker_args, (dir / "tracker2.log").string());
  std::string error;
  REQUIRE(eventually(10, [&] { return !pool_of(address, secret, &error).members.empty(); }));
  const auto restarted = pool_of(address, secret);
  CHECK(before_restart.value <= restarted.epoch.value);
  const auto kept = names(restarted);
  CHECK(std::find(kept.begin(), kept.end(), "node_0") != kept.end());
  CHECK(eventually(15, [&] {
    return count_of(test::read_text(daemons.log_path(0)), "registered with tracker") >= 2 &&
           count_of(test::read_text(daemons.log_path(1)), "registered with tracker") >= 2;
  }));
  // The fakes do not heartbeat: they expire, the two live daemons stay.
  CHECK(eventually(10, [&] {
    return names(pool_of(address, secret)) == std::vector<std::string>{"node_0", "node_1"};
  }));

  // A daemon stopped with SIGTERM leaves at once, not at its expiry.
  daemons.signal(1, SIGTERM);
  CHECK(daemons.wait_exit(1, 30) == 0);
  CHECK(names(pool_of(address, secret)) == std::vector<std::string>{"node_0"});
  CHECK(test::read_text(dir / "tracker2.log").find("node_1 left (its daemon stopped)") !=
        std::string::npos);
}
