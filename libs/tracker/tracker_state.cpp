#include "libs/tracker/tracker_state.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "libs/base/json_reader.h"

namespace ravnest::tracker {

namespace {

using json = nlohmann::json;

json hardware_json(const MeasuredHardware& h) {
  return json{{"memory_bytes", h.memory_bytes},
              {"memory_source", h.memory_source},
              {"declared_memory_bytes", h.declared_memory_bytes},
              {"gpu_memory_bytes", h.gpu_memory_bytes},
              {"gflops", h.gflops},
              {"bandwidth_mbps", h.bandwidth_mbps}};
}

MeasuredHardware read_hardware(const base::JsonReader& reader, const json& object,
                               const std::string& path) {
  MeasuredHardware h;
  h.memory_bytes = reader.uint64(object, path, "memory_bytes");
  h.memory_source = reader.string(object, path, "memory_source");
  h.declared_memory_bytes = reader.uint64(object, path, "declared_memory_bytes");
  const json& gpus = reader.array(object, path, "gpu_memory_bytes");
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].is_number_unsigned()) {
      reader.fail(path + ".gpu_memory_bytes[" + std::to_string(i) + "]",
                  "must be a whole number of bytes");
    }
    h.gpu_memory_bytes.push_back(gpus[i].get<uint64_t>());
  }
  h.gflops = reader.number(object, path, "gflops");
  h.bandwidth_mbps = reader.number(object, path, "bandwidth_mbps");
  return h;
}

}  // namespace

std::string state_json(const Membership& membership) {
  json members = json::array();
  for (const auto& [name, m] : membership.members) {
    members.push_back(json{{"name", name},
                           {"addresses", m.registration.addresses},
                           {"from_host", m.from_host},
                           {"registered_at_unix", m.registered_at_unix},
                           {"hardware", hardware_json(m.registration.hardware)},
                           {"relay_offered", m.registration.relay_offered}});
  }
  return json{{"format", 1}, {"epoch", membership.epoch.value}, {"members", members}}.dump(1) +
         "\n";
}

Membership parse_state(const std::string& text, const std::string& origin, double now) {
  const base::JsonReader reader(origin);
  const json top = reader.parse_object(text);
  if (reader.integer(top, "", "format") != 1) reader.fail("format", "must be 1");
  Membership membership;
  membership.epoch.value = reader.uint64(top, "", "epoch");
  const json& members = reader.array(top, "", "members");
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string path = "members[" + std::to_string(i) + "]";
    if (!members[i].is_object()) reader.fail(path, "must be an object");
    Member m;
    m.registration.name = reader.string(members[i], path, "name");
    m.registration.addresses = reader.string_list(members[i], path, "addresses");
    m.registration.hardware =
        read_hardware(reader, reader.object(members[i], path, "hardware"), path + ".hardware");
    m.from_host = reader.string(members[i], path, "from_host");
    // Absent in the files of trackers before relays were offered through them.
    if (members[i].contains("relay_offered")) {
      m.registration.relay_offered = reader.string(members[i], path, "relay_offered");
    }
    m.registered_at_unix = reader.number(members[i], path, "registered_at_unix");
    m.last_heartbeat = now;
    const std::string problem = registration_problem(m.registration);
    if (!problem.empty()) reader.fail(path, problem);
    const std::string name = m.registration.name;
    if (!membership.members.emplace(name, std::move(m)).second) {
      reader.fail(path + ".name", "\"" + name + "\" twice");
    }
  }
  return membership;
}

std::string pool_json(const std::map<std::string, Member>& members) {
  json pool = json::object();
  for (const auto& [name, m] : members) {
    const auto& h = m.registration.hardware;
    json benchmarks{{"ram", static_cast<double>(h.memory_bytes) / 1e9},
                    {"bandwidth", h.bandwidth_mbps}};
    if (h.gflops > 0) benchmarks["gflops"] = h.gflops;
    if (!h.gpu_memory_bytes.empty()) {
      const uint64_t largest =
          *std::max_element(h.gpu_memory_bytes.begin(), h.gpu_memory_bytes.end());
      if (largest > 0) benchmarks["gpu_memory"] = static_cast<double>(largest) / 1e9;
    }
    json measured = hardware_json(h);
    measured["addresses"] = m.registration.addresses;
    pool[name.substr(5)] = json{{"IP", m.registration.addresses.front()},
                                {"benchmarks", benchmarks},
                                {"measured", measured}};
  }
  return pool.dump(1) + "\n";
}

}  // namespace ravnest::tracker
