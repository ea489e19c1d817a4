#include "libs/config/pool/pool_edit.h"

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"

namespace ravnest::config {
namespace {

void check_positive(const std::string& origin, const std::string& what, double value) {
  if (!(value > 0) || !std::isfinite(value)) {
    std::ostringstream text;
    text << origin << ": " << what << " must be a positive number, not " << value;
    throw base::ConfigError(text.str());
  }
}

std::string toml_text(const toml::table& table) {
  std::ostringstream out;
  out << table << '\n';
  return out.str();
}

}  // namespace

int pool_node_id(const std::string& name) {
  std::string digits = name.rfind("node_", 0) == 0 ? name.substr(5) : name;
  bool ok = !digits.empty() && digits.size() < 10;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (!ok) {
    throw base::ConfigError("node name \"" + name + "\": a pool node is named by its id, N or "
                            "node_N (N a number)");
  }
  return std::stoi(digits);
}

std::string add_pool_node(const std::string& text, bool toml, const std::string& origin,
                          const NewPoolNode& node) {
  const std::string name = "node_" + std::to_string(node.id);
  check_positive(origin, name + ": --ram (GB)", node.ram_gb);
  check_positive(origin, name + ": --bandwidth (Mbps)", node.bandwidth_mbps);
  if (node.gpu_memory_gb) check_positive(origin, name + ": --gpu-memory (GB)", *node.gpu_memory_gb);
  for (const auto& existing : parse_node_pool(text, origin, toml)) {
    if (existing.id == node.id) {
      throw base::ConfigError(origin + ": " + name + " is already in the pool (at " +
                              existing.address + ")");
    }
    if (existing.address == node.address) {
      throw base::ConfigError(origin + ": " + name + ": the address " + node.address + " is " +
                              existing.name + "'s");
    }
  }
  std::string out;
  const std::string key = std::to_string(node.id);
  if (toml) {
    toml::table table = toml::parse(text, origin);
    toml::table benchmarks{{"ram", node.ram_gb}, {"bandwidth", node.bandwidth_mbps}};
    if (node.gpu_memory_gb) benchmarks.insert("gpu_memory", *node.gpu_memory_gb);
    table.insert(key, toml::table{{"IP", node.address}, {"benchmarks", std::move(benchmarks)}});
    out = toml_text(table);
  } else {
    auto pool = nlohmann::json::parse(text);
    nlohmann::json benchmarks = {{"ram", node.ram_gb}, {"bandwidth", node.bandwidth_mbps}};
    if (node.gpu_memory_gb) benchmarks["gpu_memory"] = *node.gpu_memory_gb;
    pool[key] = {{"IP", node.address}, {"benchmarks", benchmarks}};
    out = pool.dump(2) + "\n";
  }
  // The address and everything else as the pool's reader checks them.
  parse_node_pool(out, origin, toml);
  return out;
}

std::string remove_pool_node(const std::string& text, bool toml, const std::string& origin,
                             int id) {
  bool found = false;
  for (const auto& existing : parse_node_pool(text, origin, toml)) found = found || existing.id == id;
  const std::string key = std::to_string(id);
  if (!found) throw base::ConfigError(origin + ": node_" + key + " is not in the pool");
  if (toml) {
    toml::table table = toml::parse(text, origin);
    table.erase(key);
    return toml_text(table);
  }
  auto pool = nlohmann::json::parse(text);
  pool.erase(key);
  return pool.dump(2) + "\n";
}

}  // namespace ravnest::config
