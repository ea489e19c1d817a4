#include "libs/tracker/membership.h"

#include <algorithm>
#include <stdexcept>

#include "libs/base/address.h"
#include "libs/base/printable.h"

namespace ravnest::tracker {

bool MeasuredHardware::operator==(const MeasuredHardware& o) const {
  return memory_bytes == o.memory_bytes && memory_source == o.memory_source &&
         declared_memory_bytes == o.declared_memory_bytes &&
         gpu_memory_bytes == o.gpu_memory_bytes && gflops == o.gflops &&
         bandwidth_mbps == o.bandwidth_mbps;
}

void check_bounds(const Bounds& bounds) {
  if (!(bounds.heartbeat_seconds > 0)) {
    throw std::invalid_argument("heartbeat seconds must be positive");
  }
  if (!(bounds.expiry_seconds > bounds.heartbeat_seconds)) {
    throw std::invalid_argument("expiry seconds must be above the heartbeat interval");
  }
  if (bounds.max_members == 0) throw std::invalid_argument("max nodes must be positive");
  if (bounds.max_per_host == 0) throw std::invalid_argument("max nodes per host must be positive");
}

namespace {

bool is_node_name(const std::string& name) {
  const std::string prefix = "node_";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 9) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

constexpr size_t kMaxAddresses = 16;
// A host name's 253 bytes, in brackets, and ":65535".
constexpr size_t kMaxAddressBytes = 253 + 2 + 6;
// "memory_limit", "cgroup memory.max", "MemAvailable": a short name.
constexpr size_t kMaxMemorySourceBytes = 64;

// Printable ASCII: what the tracker logs and writes to its JSON state file as it came.
bool is_printable_ascii(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

std::string registration_problem(const Registration& registration) {
  if (!is_node_name(registration.name)) {
    return "name \"" + base::printable(registration.name.substr(0, 64)) +
           "\" is not node_<id>";
  }
  if (registration.addresses.empty()) return registration.name + ": no address";
  if (registration.addresses.size() > kMaxAddresses) {
    return registration.name + ": more than " + std::to_string(kMaxAddresses) + " addresses";
  }
  for (const auto& address : registration.addresses) {
    if (address.size() > kMaxAddressBytes) {
      return registration.name + ": an address longer than " + std::to_string(kMaxAddressBytes) +
             " bytes";
    }
    std::string why;
    if (!base::Address::try_parse(address, base::Address::PortRule::kRequired, &why)) {
      return registration.name + ": address \"" + base::printable(address.substr(0, 64)) +
             "\" " + why;
    }
  }
  if (registration.relay_offered.size() > kMaxAddressBytes) {
    return registration.name + ": a relay offered longer than " +
           std::to_string(kMaxAddressBytes) + " bytes";
  }
  if (!registration.relay_offered.empty()) {
    std::string why;
    if (!base::Address::try_parse(registration.relay_offered, base::Address::PortRule::kRequired,
                                  &why)) {
      return registration.name + ": relay offered \"" +
             base::printable(registration.relay_offered.substr(0, 64)) + "\" " + why;
    }
  }
  const auto& h = registration.hardware;
  if (h.memory_bytes == 0) return registration.name + ": no measured memory";
  if (h.memory_source.size() > kMaxMemorySourceBytes || !is_printable_ascii(h.memory_source)) {
    return registration.name + ": memory source \"" +
           base::printable_quoted(h.memory_source, kMaxMemorySourceBytes) +
           "\" is not a name of at most " + std::to_string(kMaxMemorySourceBytes) +
           " printable characters";
  }
  if (!(h.bandwidth_mbps > 0) || !(h.bandwidth_mbps < 1e9)) {
    return registration.name + ": no measured bandwidth";
  }
  if (!(h.gflops >= 0) || !(h.gflops < 1e12)) return registration.name + ": gflops out of range";
  if (registration.hardware.gpu_memory_bytes.size() > 64) {
    return registration.name + ": more than 64 GPUs";
  }
  return "";
}

RegisterOutcome register_member(Membership& membership, const Registration& registration,
                                const std::string& from_host, double now, double now_unix,
                                const Bounds& bounds, bool same_session) {
  RegisterOutcome outcome;
  const std::string problem = registration_problem(registration);
  if (!problem.empty()) {
    outcome.refusal = "refused: " + problem;
    return outcome;
  }
  auto found = membership.members.find(registration.name);
  if (found != membership.members.end()) {
    Member& member = found->second;
    const bool moved =
        member.registration.addresses.front() != registration.addresses.front();
    if (moved && !same_session) {
      outcome.refusal = "refused: " + registration.name + " is registered from " +
                        member.registration.addresses.front() + " (live; it expires " +
                        "without heartbeats)";
      return outcome;
    }
    outcome.accepted = true;
    outcome.changed = member.registration.addresses != registration.addresses ||
                      !(member.registration.hardware == registration.hardware) ||
                      member.registration.relay_offered != registration.relay_offered ||
                      member.from_host != from_host;
    if (member.from_host != from_host) {
      const size_t from_there = std::count_if(
          membership.members.begin(), membership.members.end(),
          [&](const auto& entry) { return entry.second.from_host == from_host; });
      if (from_there >= bounds.max_per_host) {
        outcome = RegisterOutcome{};
        outcome.refusal = "refused: " + std::to_string(from_there) + " nodes registered from " +
                          from_host + " already (at most " + std::to_string(bounds.max_per_host) +
                          " a host)";
        return outcome;
      }
    }
    member.registration = registration;
    member.from_host = from_host;
    member.last_heartbeat = now;
    outcome.moved = moved;
    if (outcome.changed) ++membership.epoch.value;
    return outcome;
  }
  if (membership.members.size() >= bounds.max_members) {
    outcome.refusal = "refused: the pool is full (" + std::to_string(bounds.max_members) +
                      " nodes)";
    return outcome;
  }
  const size_t from_there = std::count_if(
      membership.members.begin(), membership.members.end(),
      [&](const auto& entry) { return entry.second.from_host == from_host; });
  if (from_there >= bounds.max_per_host) {
    outcome.refusal = "refused: " + std::to_string(from_there) + " nodes registered from " +
                      from_host + " already (at most " + std::to_string(bounds.max_per_host) +
                      " a host)";
    return outcome;
  }
  Member member;
  member.registration = registration;
  member.from_host = from_host;
  member.last_heartbeat = now;
  member.registered_at_unix = now_unix;
  membership.members.emplace(registration.name, std::move(member));
  ++membership.epoch.value;
  outcome.accepted = outcome.joined = outcome.changed = true;
  return outcome;
}

bool heartbeat(Membership& membership, const std::string& name, double now) {
  auto found = membership.members.find(name);
  if (found == membership.members.end()) return false;
  found->second.last_heartbeat = std::max(found->second.last_heartbeat, now);
  return true;
}

std::vector<std::string> expire(Membership& membership, double now, const Bounds& bounds) {
  std::vector<std::string> gone;
  for (auto it = membership.members.begin(); it != membership.members.end();) {
    if (now - it->second.last_heartbeat >= bounds.expiry_seconds) {
      gone.push_back(it->first);
      it = membership.members.erase(it);
    } else {
      ++it;
    }
  }
  if (!gone.empty()) ++membership.epoch.value;
  return gone;
}

bool leave(Membership& membership, const std::string& name) {
  if (membership.members.erase(name) == 0) return false;
  ++membership.epoch.value;
  return true;
}

bool RateLimit::take(double now) {
  if (tokens < 0) {
    tokens = burst;
    updated_at = now;
  }
  tokens = std::min(burst, tokens + std::max(0.0, now - updated_at) * per_second);
  updated_at = now;
  if (tokens < 1) return false;
  tokens -= 1;
  return true;
}

}  // namespace ravnest::tracker
