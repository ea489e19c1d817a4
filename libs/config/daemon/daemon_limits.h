// DaemonLimits: every size, count and time a peer could otherwise decide on a daemon, with sane
// defaults; the [limits] table of ravnestd's configuration (configs/ravnestd.toml documents each,
// docs/security.md says what each bounds). Before a peer proved the secret the limits are fixed
// and small (4 KiB per message, 16 KiB in all, libs/wire/guarded_stream.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ravnest::config {

struct DaemonLimits {
  // One message, by kind, once the peer proved the secret (bytes, framing included).
  uint64_t push_stage_bytes = uint64_t{64} << 20;     // Node.pushStage: a stage's metadata (the stage streams)
  uint64_t send_bytes = uint64_t{64} << 20;           // Node.send: a micro-batch's inline values
  uint64_t stream_chunk_bytes = uint64_t{16} << 20;   // one write into a stream (file, tensors, ring)
  uint64_t message_bytes = uint64_t{1} << 20;         // any other message
  // What a stream may announce (bytes).
  uint64_t file_bytes = uint64_t{64} << 30;       // Node.pushStage, pushFile, storeCheckpoint
  uint64_t transfer_bytes = uint64_t{4} << 30;    // the tensors of one Node.send
  // Connections and streams held at once.
  uint64_t connections = 256;            // in all
  uint64_t connections_per_peer = 64;    // from one host
  uint64_t streams_per_peer = 256;       // sinks one host writes into
  // Times (seconds).
  uint64_t handshake_seconds = 10;       // TLS handshake
  uint64_t authenticate_seconds = 10;    // from the handshake to the gate's open()
  uint64_t message_seconds = 30;         // a message may take this + its size / min_bytes_per_second
  uint64_t min_bytes_per_second = 65536;
  uint64_t idle_seconds = 600;           // nothing read or written on an open connection
};

// The keys of [limits], in the order above, with the values each accepts.
struct DaemonLimitKey {
  std::string_view name;
  uint64_t DaemonLimits::*field;
  uint64_t minimum;
  uint64_t maximum;
};
extern const std::array<DaemonLimitKey, 14> kDaemonLimitKeys;

}  // namespace ravnest::config
