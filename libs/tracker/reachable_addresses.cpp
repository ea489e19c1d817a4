#include "libs/tracker/reachable_addresses.h"

namespace ravnest::tracker {

bool is_wildcard_host(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::";
}

std::vector<std::string> reachable_addresses(const std::string& listen_host, unsigned port,
                                             const std::vector<std::string>& interface_ipv4) {
  const std::string suffix = ":" + std::to_string(port);
  std::vector<std::string> out;
  if (is_wildcard_host(listen_host)) {
    for (const auto& ip : interface_ipv4) {
      if (ip.rfind("127.", 0) != 0) out.push_back(ip + suffix);
    }
    if (out.empty()) out.push_back("127.0.0.1" + suffix);
    return out;
  }
  const bool v6 = listen_host.find(':') != std::string::npos;
  out.push_back((v6 ? "[" + listen_host + "]" : listen_host) + suffix);
  return out;
}

}  // namespace ravnest::tracker
