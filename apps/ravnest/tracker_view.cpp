#include "apps/ravnest/tracker_view.h"

#include <cstdio>

namespace ravnest::cli {

std::string tracker_pool_table(const tracker::PoolSnapshot& pool) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-10s %-22s %10s %-24s %10s %10s %9s\n", "node", "address",
                "memory GB", "GPU memory GB", "GFLOP/s", "Mbit/s", "heard");
  out += line;
  for (const auto& m : pool.members) {
    const auto& h = m.registration.hardware;
    std::string gpus;
    for (auto bytes : h.gpu_memory_bytes) {
      char one[32];
      std::snprintf(one, sizeof one, "%s%.1f", gpus.empty() ? "" : ",",
                    static_cast<double>(bytes) / 1e9);
      gpus += one;
    }
    if (gpus.empty()) gpus = "-";
    char heard[32];
    std::snprintf(heard, sizeof heard, "%.0fs ago", m.seconds_since_heartbeat);
    std::snprintf(line, sizeof line, "%-10s %-22s %10.2f %-24s %10.1f %10.0f %9s\n",
                  m.registration.name.c_str(), m.registration.addresses.front().c_str(),
                  static_cast<double>(h.memory_bytes) / 1e9, gpus.c_str(), h.gflops,
                  h.bandwidth_mbps, heard);
    out += line;
  }
  std::snprintf(line, sizeof line, "%zu node(s) live, epoch %llu (a node leaves after %.0f s "
                "without a heartbeat)\n", pool.members.size(),
                static_cast<unsigned long long>(pool.epoch.value), pool.expiry_seconds);
  out += line;
  return out;
}

nlohmann::json tracker_pool_state(const tracker::PoolSnapshot& pool, const std::string& address) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& m : pool.members) {
    const auto& h = m.registration.hardware;
    nodes.push_back({{"name", m.registration.name},
                     {"address", m.registration.addresses.front()},
                     {"memory_bytes", h.memory_bytes},
                     {"memory_source", h.memory_source},
                     {"gpu_memory_bytes", h.gpu_memory_bytes},
                     {"gflops", h.gflops},
                     {"bandwidth_mbps", h.bandwidth_mbps},
                     {"seconds_since_heartbeat", m.seconds_since_heartbeat}});
  }
  return {{"address", address},
          {"epoch", pool.epoch.value},
          {"expiry_seconds", pool.expiry_seconds},
          {"nodes", nodes}};
}

}  // namespace ravnest::cli
