// The addresses a daemon registers with the tracker (docs/tracker.md): where it can be reached,
// from where it listens. Pure: the interfaces' addresses are the caller's (getifaddrs).
#pragma once

#include <string>
#include <vector>

namespace ravnest::tracker {

// "0.0.0.0", "::" or "": every interface of the host.
bool is_wildcard_host(const std::string& host);

// A daemon listening on `listen_host`:`port`, whose interfaces have `interface_ipv4` (loopback
// included or not): a wildcard host ("0.0.0.0", "::", "") gives every non-loopback address, in
// the interfaces' order, else "127.0.0.1"; any other host itself (an IPv6 one in brackets).
std::vector<std::string> reachable_addresses(const std::string& listen_host, unsigned port,
                                             const std::vector<std::string>& interface_ipv4);

}  // namespace ravnest::tracker
