#include "libs/tracker/dial_back.h"

#include <algorithm>

#include "libs/base/address.h"
#include "libs/tracker/reachable_addresses.h"

namespace ravnest::tracker {

std::string own_relay_address(const std::string& relay_host, unsigned port) {
  if (is_wildcard_host(relay_host)) return ":" + std::to_string(port);
  const bool v6 = relay_host.find(':') != std::string::npos;
  return (v6 ? "[" + relay_host + "]" : relay_host) + ":" + std::to_string(port);
}

std::vector<std::string> relays_offered(const Membership& membership, const std::string& own_relay,
                                        size_t at_most) {
  std::vector<std::string> relays;
  auto add = [&](const std::string& relay) {
    if (relay.empty() || relays.size() >= at_most) return;
    if (std::find(relays.begin(), relays.end(), relay) == relays.end()) relays.push_back(relay);
  };
  add(own_relay);
  for (const auto& [name, member] : membership.members) add(member.registration.relay_offered);
  return relays;
}

std::optional<std::string> relay_to_hold(const DialBack& dial_back,
                                         const std::string& tracker_address,
                                         const std::string& avoid) {
  if (dial_back.reached) return std::nullopt;
  // The tracker's host as the daemon writes it ("[v6]" in brackets).
  const std::string tracker = base::Address::parse(tracker_address, "--tracker").str();
  const std::string tracker_host = tracker.substr(0, tracker.rfind(':'));
  for (const auto& named : dial_back.relays) {
    const std::string relay = named.rfind(':', 0) == 0 ? tracker_host + named : named;
    if (auto address = base::Address::try_parse(relay, base::Address::PortRule::kRequired)) {
      if (address->str() != avoid) return address->str();
    }
  }
  return std::nullopt;
}

}  // namespace ravnest::tracker
