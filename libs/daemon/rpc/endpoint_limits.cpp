#include "libs/daemon/rpc/endpoint_limits.h"

#include <algorithm>

#include <capnp/capability.h>

#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

namespace {

kj::Duration seconds(uint64_t s) { return static_cast<int64_t>(s) * kj::SECONDS; }

}  // namespace

wire::RpcServer::Options endpoint_options(const config::DaemonLimits& limits) {
  wire::RpcServer::Options options;
  auto& m = options.limits;
  const uint64_t node = capnp::typeId<schema::Node>();
  const uint64_t byte_sink = capnp::typeId<schema::ByteSink>();
  const uint64_t ring_sink = capnp::typeId<schema::RingSink>();
  // Method numbers are the schema's ordinals (schemas/ravnest.capnp).
  m.calls[{node, 0}] = {"Node.pushStage", limits.push_stage_bytes};
  m.calls[{node, 9}] = {"Node.send", limits.send_bytes};
  m.calls[{byte_sink, 0}] = {"ByteSink.write", limits.stream_chunk_bytes};
  m.calls[{ring_sink, 0}] = {"RingSink.segment", limits.stream_chunk_bytes};
  m.other_message_bytes = limits.message_bytes;
  uint64_t largest = limits.message_bytes;
  for (const auto& [key, call] : m.calls) largest = std::max(largest, call.bytes);
  m.message_bytes = largest;
  options.connection.max_message_bytes = largest;
  options.handshake_timeout = seconds(limits.handshake_seconds);
  options.open_timeout = seconds(limits.authenticate_seconds);
  options.timeouts.message_grace = seconds(limits.message_seconds);
  options.timeouts.min_bytes_per_second = limits.min_bytes_per_second;
  options.timeouts.idle = seconds(limits.idle_seconds);
  options.max_connections = limits.connections;
  options.max_connections_per_peer = limits.connections_per_peer;
  return options;
}

}  // namespace ravnest::daemon
