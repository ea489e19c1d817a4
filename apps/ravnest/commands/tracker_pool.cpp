#include "apps/ravnest/commands/tracker_pool.h"

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

}  // namespace ravnest::cli
