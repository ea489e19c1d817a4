// The tracker's membership as plain functions (libs/tracker/membership.h): registration, heartbeat,
// expiry and the epoch, the bounds per host and in all, the rate limit; its state file read back
// as written, and the pool file it writes read by node_pool.h as clusterize reads it.
#include <catch2/catch.hpp>

#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"
#include "libs/tracker/dial_back.h"
#include "libs/tracker/membership.h"
#include "libs/tracker/reachable_addresses.h"
#include "libs/tracker/tracker_state.h"

namespace rt = ravnest::tracker;

namespace {

rt::Registration node(int id, const std::string& address, double gflops = 10) {
  rt::Registration r;
  r.name = "node_" + std::to_string(id);
  r.addresses = {address};
  r.hardware.memory_bytes = 8'000'000'000;
  r.hardware.memory_source = "MemAvailable";
  r.hardware.gflops = gflops;
  r.hardware.bandwidth_mbps = 100;
  return r;
}

rt::Bounds bounds() {
  rt::Bounds b;
  b.heartbeat_seconds = 10;
  b.expiry_seconds = 30;
  b.max_members = 5;
  b.max_per_host = 3;
  return b;
}

}  // namespace

TEST_CASE("a registration joins once, raises the epoch, and heartbeats keep it") {
  rt::Membership m;
  const auto b = bounds();
  auto joined = rt::register_member(m, node(0, "10.0.0.1:8080"), "10.0.0.1", 0, 1e9, b);
  CHECK(joined.accepted);
  CHECK(joined.joined);
  CHECK(m.epoch == rt::Epoch{1});
  // The same again: an update that changes nothing keeps the epoch.
  auto again = rt::register_member(m, node(0, "10.0.0.1:8080"), "10.0.0.1", 1, 1e9, b);
  CHECK(again.accepted);
  CHECK_FALSE(again.joined);
  CHECK(m.epoch == rt::Epoch{1});
  // New figures: a change.
  auto faster = rt::register_member(m, node(0, "10.0.0.1:8080", 20), "10.0.0.1", 2, 1e9, b);
  CHECK(faster.changed);
  CHECK(m.epoch == rt::Epoch{2});
  // Heartbeats every 10 s for a minute: never expired, epoch unchanged.
  for (double t = 10; t <= 60; t += 10) {
    CHECK(rt::heartbeat(m, "node_0", t));
    CHECK(rt::expire(m, t + 1, b).empty());
  }
  CHECK(m.epoch == rt::Epoch{2});
  CHECK_FALSE(rt::heartbeat(m, "node_9", 60));
}

TEST_CASE("a member expires after the expiry without heartbeats, once, raising the epoch") {
  rt::Membership m;
  const auto b = bounds();
  rt::register_member(m, node(0, "10.0.0.1:8080"), "10.0.0.1", 0, 1e9, b);
  rt::register_member(m, node(1, "10.0.0.2:8080"), "10.0.0.2", 0, 1e9, b);
  rt::heartbeat(m, "node_1", 25);
  const rt::Epoch before = m.epoch;
  CHECK(rt::expire(m, 29.9, b).empty());
  const auto gone = rt::expire(m, 30, b);
  REQUIRE(gone == std::vector<std::string>{"node_0"});
  CHECK(m.epoch.value == before.value + 1);
  CHECK(rt::expire(m, 30, b).empty());
  CHECK(m.epoch.value == before.value + 1);
  // The expired daemon's heartbeat is not known: it registers again, a join.
  CHECK_FALSE(rt::heartbeat(m, "node_0", 31));
  CHECK(rt::register_member(m, node(0, "10.0.0.1:8080"), "10.0.0.1", 31, 1e9, b).joined);
  CHECK(rt::leave(m, "node_1"));
  CHECK_FALSE(rt::leave(m, "node_1"));
  CHECK(m.members.size() == 1);
}

TEST_CASE("a live name from another address is refused; expired, it may come from elsewhere") {
  rt::Membership m;
  const auto b = bounds();
  rt::register_member(m, node(0, "10.0.0.1:8080"), "10.0.0.1", 0, 1e9, b);
  auto other = rt::register_member(m, node(0, "10.0.0.7:8080"), "10.0.0.7", 1, 1e9, b);
  CHECK_FALSE(other.accepted);
  CHECK(other.refusal == "refused: node_0 is registered from 10.0.0.1:8080 (live; it expires "
                         "without heartbeats)");
  CHECK(m.members.at("node_0").registration.addresses.front() == "10.0.0.1:8080");
  rt::expire(m, 40, b);
  CHECK(rt::register_member(m, node(0, "10.0.0.7:8080"), "10.0.0.7", 41, 1e9, b).accepted);
}

TEST_CASE("a live member moves to a new address over the connection that registered it") {
  rt::Membership m;
  const auto b = bounds();
  rt::register_member(m, node(1, "10.0.0.3:8081"), "10.0.0.1", 0, 1e9, b);
  const uint64_t epoch = m.epoch.value;
  // Its relay changed (--relay auto): the same session registers the new relay's host.
  auto moved = rt::register_member(m, node(1, "10.0.0.4:8081"), "10.0.0.1", 1, 1e9, b, true);
  CHECK(moved.accepted);
  CHECK(moved.moved);
  CHECK_FALSE(moved.joined);
  CHECK(moved.changed);
  CHECK(m.epoch.value == epoch + 1);
  CHECK(m.members.size() == 1);
  CHECK(m.members.at("node_1").registration.addresses.front() == "10.0.0.4:8081");
  // Another connection claiming the name at yet another address is still refused.
  auto other = rt::register_member(m, node(1, "10.0.0.5:8081"), "10.0.0.1", 2, 1e9, b);
  CHECK_FALSE(other.accepted);
  CHECK(other.refusal == "refused: node_1 is registered from 10.0.0.4:8081 (live; it expires "
                         "without heartbeats)");
  // The same address again is no move.
  auto again = rt::register_member(m, node(1, "10.0.0.4:8081"), "10.0.0.1", 3, 1e9, b, true);
  CHECK(again.accepted);
  CHECK_FALSE(again.moved);
  CHECK_FALSE(again.changed);
}

TEST_CASE("registrations are bounded per host and in all, refusing with one line") {
  rt::Membership m;
  const auto b = bounds();
  // 10,000 fake registrations from one host: max_per_host accepted, the rest refused.
  size_t accepted = 0;
  std::string refusal;
  for (int i = 0; i < 10000; ++i) {
    auto r = rt::register_member(m, node(i, "10.0.0.1:" + std::to_string(1000 + i % 60000)),
                                 "10.0.0.1", i * 1e-3, 1e9, b);
    if (r.accepted) ++accepted;
    else refusal = r.refusal;
  }
  CHECK(accepted == b.max_per_host);
  CHECK(m.members.size() == b.max_per_host);
  CHECK(refusal == "refused: 3 nodes registered from 10.0.0.1 already (at most 3 a host)");
  // In all: max_members.
  rt::register_member(m, node(20000, "10.0.0.2:1"), "10.0.0.2", 11, 1e9, b);
  rt::register_member(m, node(20001, "10.0.0.3:1"), "10.0.0.3", 11, 1e9, b);
  auto full = rt::register_member(m, node(20002, "10.0.0.4:1"), "10.0.0.4", 11, 1e9, b);
  CHECK_FALSE(full.accepted);
  CHECK(full.refusal == "refused: the pool is full (5 nodes)");
  CHECK(m.members.size() == 5);
}

TEST_CASE("malformed registrations are refused naming what is wrong") {
  rt::Membership m;
  const auto b = bounds();
  auto bad_name = node(0, "10.0.0.1:8080");
  bad_name.name = "worker";
  CHECK(rt::register_member(m, bad_name, "h", 0, 0, b).refusal ==
        "refused: name \"worker\" is not node_<id>");
  auto no_address = node(0, "10.0.0.1:8080");
  no_address.addresses.clear();
  CHECK(rt::register_member(m, no_address, "h", 0, 0, b).refusal == "refused: node_0: no address");
  auto bad_address = node(0, "10.0.0.1");
  CHECK(rt::register_member(m, bad_address, "h", 0, 0, b).refusal.rfind(
            "refused: node_0: address \"10.0.0.1\"", 0) == 0);
  auto no_bandwidth = node(0, "10.0.0.1:8080");
  no_bandwidth.hardware.bandwidth_mbps = 0;
  CHECK(rt::register_member(m, no_bandwidth, "h", 0, 0, b).refusal ==
        "refused: node_0: no measured bandwidth");
  auto bad_relay = node(0, "10.0.0.1:8080");
  bad_relay.relay_offered = "10.0.0.1";
  CHECK(rt::register_member(m, bad_relay, "h", 0, 0, b).refusal.rfind(
            "refused: node_0: relay offered \"10.0.0.1\"", 0) == 0);
  // Found by fuzzing (tests/fuzz/tracker_calls/regression-*): a memory source that is not UTF-8
  // made every save of the state file throw, one with a line break forged a log line, and
  // addresses of any length made a member of any size.
  auto not_utf8 = node(0, "10.0.0.1:8080");
  not_utf8.hardware.memory_source = "Mem\xff";
  CHECK(rt::register_member(m, not_utf8, "h", 0, 0, b).refusal ==
        "refused: node_0: memory source \"Mem\\xff\" is not a name of at most 64 printable "
        "characters");
  auto line_break = node(0, "10.0.0.1:8080");
  line_break.hardware.memory_source = "MemAvailable\ninfo: forged";
  CHECK(rt::register_member(m, line_break, "h", 0, 0, b).refusal.find('\n') == std::string::npos);
  CHECK_FALSE(rt::register_member(m, line_break, "h", 0, 0, b).accepted);
  auto long_source = node(0, "10.0.0.1:8080");
  long_source.hardware.memory_source = std::string(65, 'm');
  CHECK_FALSE(rt::register_member(m, long_source, "h", 0, 0, b).accepted);
  auto long_address = node(0, std::string(300, 'a') + ":8080");
  CHECK(rt::register_member(m, long_address, "h", 0, 0, b).refusal ==
        "refused: node_0: an address longer than 261 bytes");
  auto long_relay = node(0, "10.0.0.1:8080");
  long_relay.relay_offered = std::string(300, 'a') + ":9000";
  CHECK(rt::register_member(m, long_relay, "h", 0, 0, b).refusal ==
        "refused: node_0: a relay offered longer than 261 bytes");
  auto longest_host = node(0, std::string(253, 'a') + ":65535");
  CHECK(rt::registration_problem(longest_host).empty());
  CHECK(m.members.empty());
  CHECK(m.epoch == rt::Epoch{0});
}

TEST_CASE("bounds are checked") {
  rt::Bounds b = bounds();
  CHECK_NOTHROW(rt::check_bounds(b));
  b.expiry_seconds = b.heartbeat_seconds;
  CHECK_THROWS_WITH(rt::check_bounds(b), "expiry seconds must be above the heartbeat interval");
  b = bounds();
  b.max_per_host = 0;
  CHECK_THROWS(rt::check_bounds(b));
}

TEST_CASE("a heartbeat storm is cut to the rate limit") {
  rt::RateLimit limit{20, 5};
  int served = 0;
  // 10,000 calls within one second: the burst and the second's refill.
  for (int i = 0; i < 10000; ++i) served += limit.take(i * 1e-4) ? 1 : 0;
  CHECK(served >= 20);
  CHECK(served <= 26);
  // Quiet for 10 s: a full burst again.
  int later = 0;
  for (int i = 0; i < 100; ++i) later += limit.take(11) ? 1 : 0;
  CHECK(later == 20);
}

TEST_CASE("the state file reads back what was written, heartbeats counted from the restart") {
  rt::Membership m;
  const auto b = bounds();
  auto gpu = node(3, "10.0.0.3:8083", 55.5);
  gpu.hardware.gpu_memory_bytes = {80'000'000'000, 40'000'000'000};
  gpu.hardware.declared_memory_bytes = 16'000'000'000;
  gpu.addresses.push_back("[::1]:8083");
  gpu.relay_offered = "10.0.0.3:9000";
  rt::register_member(m, gpu, "10.0.0.3", 5, 1.7e9, b);
  rt::register_member(m, node(1, "10.0.0.1:8081"), "10.0.0.1", 5, 1.7e9, b);
  const std::string text = rt::state_json(m);
  const auto back = rt::parse_state(text, "tracker-state.json", 100);
  CHECK(back.epoch == m.epoch);
  REQUIRE(back.members.size() == 2);
  const auto& read = back.members.at("node_3");
  CHECK(read.registration.addresses == gpu.addresses);
  CHECK(read.registration.hardware == gpu.hardware);
  CHECK(read.registration.relay_offered == "10.0.0.3:9000");
  CHECK(back.members.at("node_1").registration.relay_offered.empty());
  CHECK(read.from_host == "10.0.0.3");
  CHECK(read.last_heartbeat == 100);
  CHECK(rt::state_json(back) == text);
  CHECK_THROWS_WITH(rt::parse_state("{\"format\": 2}", "s.json", 0), "s.json: format: must be 1");
  CHECK_THROWS_AS(rt::parse_state("{\"format\": 1, \"epoch\": 1, \"members\": [{}]}", "s.json", 0),
                  ravnest::base::ConfigError);
}

TEST_CASE("the pool file is Ravnest's node_configs.json with the measured figures") {
  rt::Membership m;
  const auto b = bounds();
  auto gpu = node(3, "10.0.0.3:8083", 55.5);
  gpu.hardware.gpu_memory_bytes = {40'000'000'000, 80'000'000'000};
  rt::register_member(m, gpu, "10.0.0.3", 0, 0, b);
  auto cpu = node(12, "10.0.0.12:8080", 0);
  cpu.hardware.memory_bytes = 2'500'000'000;
  cpu.hardware.bandwidth_mbps = 940;
  rt::register_member(m, cpu, "10.0.0.12", 0, 0, b);
  const auto pool = ravnest::config::parse_node_pool(rt::pool_json(m.members), "pool", false);
  REQUIRE(pool.size() == 2);
  CHECK(pool[0].name == "node_3");
  CHECK(pool[0].address == "10.0.0.3:8083");
  CHECK(pool[0].ram_gb == Approx(8.0));
  CHECK(pool[0].gflops == Approx(55.5));
  CHECK(pool[0].gpu_memory_gb == Approx(80.0));
  CHECK(pool[1].name == "node_12");
  CHECK(pool[1].ram_gb == Approx(2.5));
  CHECK(pool[1].bandwidth_mbps == Approx(940));
  CHECK(pool[1].gflops == 0);  // not measured: absent, every node equal to the planner
}

TEST_CASE("a daemon registers the addresses it listens at") {
  using rt::reachable_addresses;
  const std::vector<std::string> interfaces = {"127.0.0.1", "10.0.0.5", "192.168.1.9"};
  CHECK(reachable_addresses("0.0.0.0", 8080, interfaces) ==
        std::vector<std::string>{"10.0.0.5:8080", "192.168.1.9:8080"});
  CHECK(reachable_addresses("0.0.0.0", 8080, {"127.0.0.1"}) ==
        std::vector<std::string>{"127.0.0.1:8080"});
  CHECK(reachable_addresses("10.0.0.5", 8081, interfaces) ==
        std::vector<std::string>{"10.0.0.5:8081"});
  CHECK(reachable_addresses("::1", 8082, interfaces) == std::vector<std::string>{"[::1]:8082"});
}

TEST_CASE("the tracker names its own relay, then the members'; a daemon it cannot reach takes the first") {
  CHECK(rt::own_relay_address("10.0.0.9", 7000) == "10.0.0.9:7000");
  CHECK(rt::own_relay_address("0.0.0.0", 7000) == ":7000");
  CHECK(rt::own_relay_address("::", 7000) == ":7000");
  CHECK(rt::own_relay_address("::1", 7000) == "[::1]:7000");
  rt::Membership m;
  const auto b = bounds();
  auto relaying = node(2, "10.0.0.2:8082");
  relaying.relay_offered = "10.0.0.2:9000";
  auto twice = node(3, "10.0.0.3:8083");
  twice.relay_offered = "10.0.0.2:9000";  // the same relay named by two members: once
  REQUIRE(rt::register_member(m, relaying, "10.0.0.2", 0, 0, b).accepted);
  REQUIRE(rt::register_member(m, twice, "10.0.0.3", 0, 0, b).accepted);
  REQUIRE(rt::register_member(m, node(1, "10.0.0.1:8081"), "10.0.0.1", 0, 0, b).accepted);
  CHECK(rt::relays_offered(m, "") == std::vector<std::string>{"10.0.0.2:9000"});
  CHECK(rt::relays_offered(m, ":7000") == std::vector<std::string>{":7000", "10.0.0.2:9000"});
  CHECK(rt::relays_offered(m, ":7000", 1) == std::vector<std::string>{":7000"});
  CHECK(rt::relays_offered(rt::Membership{}, "").empty());

  rt::DialBack answer;
  answer.relays = {":7000", "10.0.0.2:9000"};
  // Not reached: the tracker's own relay, on the host the daemon dials the tracker at.
  CHECK(rt::relay_to_hold(answer, "192.168.1.5:8600") == std::optional<std::string>("192.168.1.5:7000"));
  CHECK(rt::relay_to_hold(answer, "[fd00::5]:8600") == std::optional<std::string>("[fd00::5]:7000"));
  answer.relays = {"10.0.0.2:9000"};
  CHECK(rt::relay_to_hold(answer, "192.168.1.5:8600") == std::optional<std::string>("10.0.0.2:9000"));
  // What is not a host:port is passed over.
  answer.relays = {"", ":", ":x", "10.0.0.2", "a b:1", "10.0.0.3:9001"};
  CHECK(rt::relay_to_hold(answer, "192.168.1.5:8600") == std::optional<std::string>("10.0.0.3:9001"));
  answer.relays = {":0", "nonsense"};
  CHECK(!rt::relay_to_hold(answer, "192.168.1.5:8600"));
  // Reached, or nothing named: no relay.
  answer.reached = true;
  CHECK(!rt::relay_to_hold(answer, "192.168.1.5:8600"));
  answer.reached = false;
  answer.relays.clear();
  CHECK(!rt::relay_to_hold(answer, "192.168.1.5:8600"));
}

TEST_CASE("a daemon whose relay is lost takes the first other relay named, or none") {
  rt::DialBack answer;
  answer.relays = {"10.0.0.3:9000", ":7000", "10.0.0.4:9001"};
  // The lost relay passed over, as relay_to_hold returned it (":PORT" read on the tracker's host).
  CHECK(rt::relay_to_hold(answer, "10.0.0.1:8600", "10.0.0.3:9000") ==
        std::optional<std::string>("10.0.0.1:7000"));
  CHECK(rt::relay_to_hold(answer, "10.0.0.1:8600", "10.0.0.1:7000") ==
        std::optional<std::string>("10.0.0.3:9000"));
  // Only the lost one named, or it and nonsense: none (the daemon keeps trying the one it has).
  answer.relays = {"10.0.0.3:9000", "nonsense", ":0"};
  CHECK(!rt::relay_to_hold(answer, "10.0.0.1:8600", "10.0.0.3:9000"));
  answer.relays = {":7000"};
  CHECK(!rt::relay_to_hold(answer, "[fd00::5]:8600", "[fd00::5]:7000"));
  CHECK(rt::relay_to_hold(answer, "[fd00::5]:8600", "10.0.0.3:9000") ==
        std::optional<std::string>("[fd00::5]:7000"));
  answer.relays.clear();
  CHECK(!rt::relay_to_hold(answer, "10.0.0.1:8600", "10.0.0.3:9000"));
}
