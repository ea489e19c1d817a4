// What the daemon's server enforces, from the [limits] of its configuration (endpoint_limits.h).
#include <catch2/catch.hpp>

#include <capnp/capability.h>
#include <capnp/schema.h>

#include "libs/daemon/rpc/endpoint_limits.h"
#include "schemas/ravnest.capnp.h"

using namespace ravnest;

TEST_CASE("endpoint limits: every kind of message a daemon reads, from [limits]", "[daemon][limits]") {
  config::DaemonLimits limits;
  limits.push_stage_bytes = 100 << 20;
  limits.send_bytes = 20 << 20;
  limits.stream_chunk_bytes = 9 << 20;
  limits.message_bytes = 300 << 10;
  limits.connections = 50;
  limits.connections_per_peer = 7;
  limits.idle_seconds = 42;
  limits.message_seconds = 5;
  limits.min_bytes_per_second = 1000;
  limits.handshake_seconds = 3;
  limits.authenticate_seconds = 4;
  const auto options = daemon::endpoint_options(limits);
  const auto& calls = options.limits.calls;
  const uint64_t node = capnp::typeId<schema::Node>();
  auto limit_of = [&](uint64_t interface_id, uint16_t method) -> uint64_t {
    auto it = calls.find({interface_id, method});
    return it == calls.end() ? 0 : it->second.bytes;
  };
  // The method numbers are the schema's: a renumbered method must not silently lose its limit.
  auto ordinal = [](auto interface_schema, const char* name) {
    return interface_schema.getMethodByName(name).getOrdinal();
  };
  CHECK(ordinal(capnp::Schema::from<schema::Node>(), "pushStage") == 0);
  CHECK(ordinal(capnp::Schema::from<schema::Node>(), "send") == 9);
  CHECK(ordinal(capnp::Schema::from<schema::ByteSink>(), "write") == 0);
  CHECK(ordinal(capnp::Schema::from<schema::RingSink>(), "segment") == 0);
  CHECK(limit_of(node, 0) == 100 << 20);
  CHECK(calls.at({node, 0}).name == "Node.pushStage");
  CHECK(limit_of(node, 9) == 20 << 20);
  CHECK(calls.at({node, 9}).name == "Node.send");
  CHECK(limit_of(capnp::typeId<schema::ByteSink>(), 0) == 9 << 20);
  CHECK(limit_of(capnp::typeId<schema::RingSink>(), 0) == 9 << 20);
  CHECK(calls.size() == 4);
  CHECK(options.limits.other_message_bytes == 300 << 10);
  CHECK(options.limits.message_bytes == 100 << 20);  // the largest: the reader's traversal limit
  CHECK(options.connection.max_message_bytes == 100 << 20);
  CHECK(options.max_connections == 50);
  CHECK(options.max_connections_per_peer == 7);
  CHECK(options.timeouts.idle == 42 * kj::SECONDS);
  CHECK(options.timeouts.message_grace == 5 * kj::SECONDS);
  CHECK(options.timeouts.min_bytes_per_second == 1000);
  CHECK(options.handshake_timeout == 3 * kj::SECONDS);
  CHECK(options.open_timeout == 4 * kj::SECONDS);
  // Before authentication the limits stay the fixed, small ones.
  CHECK(options.limits.message_bytes_before_open == 4096);
  CHECK(options.limits.total_bytes_before_open == 16384);
}
