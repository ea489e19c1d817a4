#include "libs/tracker/tracker_codec.h"

#include <set>

#include "libs/tracker/tracker_state.h"

namespace ravnest::tracker {

void encode_registration(const Registration& r, schema::Registration::Builder out) {
  out.setName(r.name);
  auto addresses = out.initAddresses(static_cast<unsigned>(r.addresses.size()));
  for (unsigned i = 0; i < r.addresses.size(); ++i) addresses.set(i, r.addresses[i]);
  auto h = out.initHardware();
  h.setMemoryBytes(r.hardware.memory_bytes);
  h.setMemorySource(r.hardware.memory_source);
  h.setDeclaredMemoryBytes(r.hardware.declared_memory_bytes);
  auto gpus = h.initGpuMemoryBytes(static_cast<unsigned>(r.hardware.gpu_memory_bytes.size()));
  for (unsigned i = 0; i < r.hardware.gpu_memory_bytes.size(); ++i) {
    gpus.set(i, r.hardware.gpu_memory_bytes[i]);
  }
  h.setGflops(r.hardware.gflops);
  h.setBandwidthMbps(r.hardware.bandwidth_mbps);
  out.setRelayOffered(r.relay_offered);
}

Registration decode_registration(schema::Registration::Reader in) {
  Registration r;
  r.name = in.getName();
  for (auto address : in.getAddresses()) r.addresses.emplace_back(address);
  auto h = in.getHardware();
  r.hardware.memory_bytes = h.getMemoryBytes();
  r.hardware.memory_source = h.getMemorySource();
  r.hardware.declared_memory_bytes = h.getDeclaredMemoryBytes();
  for (auto bytes : h.getGpuMemoryBytes()) r.hardware.gpu_memory_bytes.push_back(bytes);
  r.hardware.gflops = h.getGflops();
  r.relay_offered = in.getRelayOffered();
  r.hardware.bandwidth_mbps = h.getBandwidthMbps();
  return r;
}

void encode_member(const Member& member, double seconds_since_heartbeat,
                   schema::Member::Builder out) {
  encode_registration(member.registration, out.initRegistration());
  out.setFromHost(member.from_host);
  out.setSecondsSinceHeartbeat(seconds_since_heartbeat);
  out.setRegisteredAtUnix(member.registered_at_unix);
}

PoolMember decode_member(schema::Member::Reader in) {
  PoolMember m;
  m.registration = decode_registration(in.getRegistration());
  m.from_host = in.getFromHost();
  m.seconds_since_heartbeat = in.getSecondsSinceHeartbeat();
  m.registered_at_unix = in.getRegisteredAtUnix();
  return m;
}

PoolSnapshot decode_pool(schema::Tracker::PoolResults::Reader in) {
  PoolSnapshot pool;
  pool.epoch.value = in.getEpoch();
  pool.expiry_seconds = in.getExpirySeconds();
  std::set<std::string> names;
  for (auto member : in.getMembers()) {
    const std::string where = "pool member " + std::to_string(pool.members.size()) + ": ";
    PoolMember m = decode_member(member);
    const std::string problem = registration_problem(m.registration);
    if (!problem.empty()) throw wire::WireError(where + problem);
    if (!names.insert(m.registration.name).second) {
      throw wire::WireError(where + m.registration.name + " listed twice");
    }
    pool.members.push_back(std::move(m));
  }
  return pool;
}

std::map<std::string, Member> members_of(const PoolSnapshot& pool) {
  std::map<std::string, Member> members;
  for (const auto& m : pool.members) {
    Member member;
    member.registration = m.registration;
    member.from_host = m.from_host;
    member.registered_at_unix = m.registered_at_unix;
    members.emplace(m.registration.name, std::move(member));
  }
  return members;
}

std::string pool_file_json(const PoolSnapshot& pool) { return pool_json(members_of(pool)); }

}  // namespace ravnest::tracker
