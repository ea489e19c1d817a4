// The tracker's codec (libs/tracker/tracker_codec.h): a registration and a pool through capnp and
// back, and a pool no tracker could have answered refused in one line before the requester uses
// it (found by fuzzing: tests/fuzz/tracker_calls/regression-pool-member-without-address).
#include <catch2/catch.hpp>

#include <capnp/message.h>

#include "libs/tracker/tracker_codec.h"

namespace rt = ravnest::tracker;

namespace {

rt::Member member(int id) {
  rt::Member m;
  m.registration.name = "node_" + std::to_string(id);
  m.registration.addresses = {"10.0.0." + std::to_string(id) + ":8080"};
  m.registration.hardware.memory_bytes = 8'000'000'000;
  m.registration.hardware.memory_source = "MemAvailable";
  m.registration.hardware.gpu_memory_bytes = {24'000'000'000};
  m.registration.hardware.gflops = 40;
  m.registration.hardware.bandwidth_mbps = 900;
  m.from_host = "10.0.0." + std::to_string(id);
  m.registered_at_unix = 1.7e9;
  return m;
}

// The message of the WireError decode_pool throws for `members`, "" when it accepts them.
std::string refusal(const std::vector<rt::Member>& members) {
  capnp::MallocMessageBuilder message;
  auto pool = message.initRoot<ravnest::schema::Tracker::PoolResults>();
  pool.setEpoch(3);
  auto list = pool.initMembers(static_cast<unsigned>(members.size()));
  for (unsigned i = 0; i < members.size(); ++i) rt::encode_member(members[i], 1.5, list[i]);
  try {
    const auto snapshot = rt::decode_pool(pool.asReader());
    CHECK(snapshot.epoch == rt::Epoch{3});
    CHECK(snapshot.members.size() == members.size());
    return "";
  } catch (const ravnest::wire::WireError& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("a pool decodes as the tracker encoded it, and converts to node_configs.json") {
  capnp::MallocMessageBuilder message;
  auto pool = message.initRoot<ravnest::schema::Tracker::PoolResults>();
  pool.setEpoch(9);
  pool.setExpirySeconds(30);
  auto list = pool.initMembers(2);
  rt::encode_member(member(1), 2.5, list[0]);
  rt::encode_member(member(2), 0.5, list[1]);
  const auto snapshot = rt::decode_pool(pool.asReader());
  CHECK(snapshot.epoch == rt::Epoch{9});
  CHECK(snapshot.expiry_seconds == 30);
  REQUIRE(snapshot.members.size() == 2);
  CHECK(snapshot.members[0].registration.hardware == member(1).registration.hardware);
  CHECK(snapshot.members[0].seconds_since_heartbeat == 2.5);
  CHECK(snapshot.members[1].from_host == "10.0.0.2");
  const auto members = rt::members_of(snapshot);
  CHECK(members.at("node_2").registration.addresses == member(2).registration.addresses);
  CHECK(rt::pool_file_json(snapshot).find("\"IP\": \"10.0.0.1:8080\"") != std::string::npos);
}

TEST_CASE("a pool with a member no tracker admits is refused in one line") {
  CHECK(refusal({member(1), member(2)}).empty());
  auto no_address = member(2);
  no_address.registration.addresses.clear();
  CHECK(refusal({member(1), no_address}) == "pool member 1: node_2: no address");
  auto short_name = member(1);
  short_name.registration.name = "n";
  CHECK(refusal({short_name}) == "pool member 0: name \"n\" is not node_<id>");
  auto forged = member(1);
  forged.registration.hardware.memory_source = "MemAvailable\nforged";
  const std::string line = refusal({forged});
  CHECK(line.rfind("pool member 0: node_1: memory source", 0) == 0);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(refusal({member(1), member(1)}) == "pool member 1: node_1 listed twice");
}
