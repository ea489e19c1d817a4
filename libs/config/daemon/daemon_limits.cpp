#include "libs/config/daemon/daemon_limits.h"

namespace ravnest::config {

// The minimums keep a daemon usable: a message limit below what the runtime's own messages need
// (a 1 MiB chunk, a 4 MiB ring segment, a job file) would break every job, not protect it.
namespace {
// A message is read whole into memory (Cap'n Proto's limit is 4 GiB of segments); time in KJ is
// int64 nanoseconds.
constexpr uint64_t kMessageMax = uint64_t{4} << 30;
constexpr uint64_t kStreamMax = uint64_t{1} << 50;
constexpr uint64_t kCountMax = uint64_t{1} << 20;
constexpr uint64_t kSecondsMax = 7 * 24 * 3600;
}  // namespace

const std::array<DaemonLimitKey, 14> kDaemonLimitKeys = {{
    {"push_stage_bytes", &DaemonLimits::push_stage_bytes, uint64_t{1} << 20, kMessageMax},
    {"send_bytes", &DaemonLimits::send_bytes, uint64_t{4} << 20, kMessageMax},
    {"stream_chunk_bytes", &DaemonLimits::stream_chunk_bytes, uint64_t{8} << 20, kMessageMax},
    {"message_bytes", &DaemonLimits::message_bytes, uint64_t{256} << 10, kMessageMax},
    {"file_bytes", &DaemonLimits::file_bytes, 1, kStreamMax},
    {"transfer_bytes", &DaemonLimits::transfer_bytes, 1, kStreamMax},
    {"connections", &DaemonLimits::connections, 4, kCountMax},
    {"connections_per_peer", &DaemonLimits::connections_per_peer, 2, kCountMax},
    {"streams_per_peer", &DaemonLimits::streams_per_peer, 4, kCountMax},
    {"handshake_seconds", &DaemonLimits::handshake_seconds, 1, kSecondsMax},
    {"authenticate_seconds", &DaemonLimits::authenticate_seconds, 1, kSecondsMax},
    {"message_seconds", &DaemonLimits::message_seconds, 1, kSecondsMax},
    {"min_bytes_per_second", &DaemonLimits::min_bytes_per_second, 1, kStreamMax},
    {"idle_seconds", &DaemonLimits::idle_seconds, 10, kSecondsMax},
}};

}  // namespace ravnest::config
