#include "apps/ravnest/commands/tracker_pool.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "libs/base/atomic_file.h"
#include "libs/wire/transport_security.h"

namespace ravnest::cli {

tracker::PoolSnapshot read_tracker_pool(const std::string& address, const Connection& connection) {
  connection.warn_if_insecure();
  std::string secret = connection.secret();
  auto security = wire::make_transport_security(secret, connection.insecure);
  secret.assign(secret.size(), '\0');
  try {
    return tracker::fetch_pool(address, security);
  } catch (const std::exception& e) {
    throw std::runtime_error(explain_refusal(e.what()));
  }
}

void write_tracker_pool(const tracker::PoolSnapshot& pool, const std::string& address,
                        const std::string& path) {
  if (pool.members.empty()) {
    throw std::runtime_error("tracker " + address + ": no node is registered (epoch " +
                             std::to_string(pool.epoch.value) + "); " + path + " left as it was");
  }
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  base::write_file_atomically(path, tracker::pool_file_json(pool));
}

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

}  // namespace ravnest::cli
