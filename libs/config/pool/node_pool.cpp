#include "libs/config/pool/node_pool.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "libs/base/address.h"
#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/base/json_error.h"
#include "libs/base/printable.h"
#include "libs/config/pool/tls_fingerprint.h"
#include "libs/base/toml_error.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {
namespace {

using nlohmann::json;

// TOML is read into the same JSON tree so that one validator serves both syntaxes.
json toml_to_json(const toml::node& node) {
  if (const auto* table = node.as_table()) {
    json out = json::object();
    for (const auto& [key, value] : *table) out[std::string(key.str())] = toml_to_json(value);
    return out;
  }
  if (const auto* array = node.as_array()) {
    json out = json::array();
    for (const auto& value : *array) out.push_back(toml_to_json(value));
    return out;
  }
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* b = node.as_boolean()) return b->get();
  // Dates and times: kept as text; no field of a node config takes them.
  std::ostringstream text;
  if (const auto* d = node.as_date()) text << d->get();
  else if (const auto* t = node.as_time()) text << t->get();
  else if (const auto* dt = node.as_date_time()) text << dt->get();
  return text.str();
}

std::string describe(const json& value) {
  if (value.is_string()) return json(value.get<std::string>()).dump();
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    return std::isnan(value.get<double>()) ? "nan" : "inf";
  }
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_null()) return "null";
  return value.dump();
}

bool parse_node_id(const std::string& key, int* id) {
  if (key.empty() || key.size() > 9) return false;
  for (char c : key) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *id = std::stoi(key);
  return true;
}

double positive_number(const json& benchmarks, const std::string& field, const std::string& unit,
                       const std::string& where, bool required, bool* present) {
  *present = benchmarks.contains(field);
  if (!*present) {
    if (required) throw base::ConfigError(where + "benchmarks." + field + " is missing");
    return 0;
  }
  const json& value = benchmarks.at(field);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    throw base::ConfigError(where + "benchmarks." + field + " must be a positive number (" + unit +
                      "), got " + describe(value));
  }
  return value.get<double>();
}

std::vector<NodeConfig> validate_pool(const json& root, const std::string& origin) {
  if (!root.is_object()) {
    throw base::ConfigError(origin + ": the top level must be an object mapping node ids to nodes, got " +
                      describe(root));
  }
  if (root.empty()) throw base::ConfigError(origin + ": the pool has no nodes");

  std::map<int, NodeConfig> by_id;
  std::map<int, std::string> key_of_id;
  std::map<std::string, std::string> key_of_address;
  for (const auto& [raw_key, node] : root.items()) {
    // The key and the address appear in messages: printable() keeps them one line.
    const std::string key = base::printable(raw_key, 40);
    int id = 0;
    if (!parse_node_id(raw_key, &id)) {
      throw base::ConfigError(origin + ": node key \"" + key + "\" must be a non-negative integer");
    }
    const std::string where = origin + ": node \"" + key + "\": ";
    if (auto it = key_of_id.find(id); it != key_of_id.end()) {
      throw base::ConfigError(where + "id " + std::to_string(id) + " is also used by node \"" +
                        it->second + "\"");
    }
    if (!node.is_object()) {
      throw base::ConfigError(origin + ": node \"" + key + "\" must be an object, got " + describe(node));
    }
    NodeConfig config;
    config.id = id;
    config.name = node_name(id);

    if (!node.contains("IP")) throw base::ConfigError(where + "IP is missing");
    const json& ip = node.at("IP");
    if (!ip.is_string()) {
      throw base::ConfigError(where + "IP must be a string \"host:port\", got " + describe(ip));
    }
    config.address = ip.get<std::string>();
    const auto address = base::Address::try_parse(config.address);
    if (!address) {
      throw base::ConfigError(where + "IP \"" + base::printable(config.address, 80) +
                        "\" must be \"host:port\" with a port from 1 to 65535");
    }
    config.host = address->host();
    config.port = address->port();
    if (auto it = key_of_address.find(config.address); it != key_of_address.end()) {
      throw base::ConfigError(origin + ": nodes \"" + it->second + "\" and \"" + key +
                        "\" have the same IP \"" + base::printable(config.address, 80) + "\"");
    }

    if (!node.contains("benchmarks")) throw base::ConfigError(where + "benchmarks is missing");
    const json& benchmarks = node.at("benchmarks");
    if (!benchmarks.is_object()) {
      throw base::ConfigError(where + "benchmarks must be an object, got " + describe(benchmarks));
    }
    bool present = false;
    config.ram_gb = positive_number(benchmarks, "ram", "GB", where, true, &present);
    config.bandwidth_mbps = positive_number(benchmarks, "bandwidth", "Mbps", where, true, &present);
    config.gflops = positive_number(benchmarks, "gflops", "GFLOPS", where, false, &present);
    config.gpu_memory_gb =
        positive_number(benchmarks, "gpu_memory", "GB", where, false, &present);
    if (node.contains("tls_fingerprint")) {
      const json& pin = node.at("tls_fingerprint");
      std::optional<std::string> canonical;
      if (pin.is_string()) canonical = canonical_fingerprint(pin.get<std::string>());
      if (!canonical) {
        throw base::ConfigError(where + "tls_fingerprint must be the SHA-256 of a certificate (64 hex "
                          "digits, colons allowed), got " + describe(pin));
      }
      config.tls_fingerprint = *canonical;
    }

    key_of_id[id] = key;
    key_of_address[config.address] = key;
    by_id[id] = std::move(config);
  }

  std::vector<NodeConfig> pool;
  pool.reserve(by_id.size());
  for (auto& [id, config] : by_id) pool.push_back(std::move(config));
  return pool;
}

bool ends_with_toml(const std::string& path) {
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".toml";
}

}  // namespace

std::vector<NodeConfig> parse_node_pool(const std::string& text, const std::string& origin,
                                        bool toml) {
  json root;
  if (toml) {
    root = toml_to_json(base::parse_toml(text, origin));
  } else {
    // A node id written twice would silently keep only the last node: refuse it.
    std::map<std::string, int> seen_keys;
    std::string repeated;
    const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event,
                                                  json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
        if (++seen_keys[parsed.get<std::string>()] == 2 && repeated.empty()) {
          repeated = parsed.get<std::string>();
        }
      }
      return true;
    };
    try {
      // Comments are accepted: Ravnest's documented example carries one.
      root = json::parse(text, note_keys, /*allow_exceptions=*/true, /*ignore_comments=*/true);
    } catch (const json::exception& error) {
      // parse_error, and out_of_range for a number beyond what a double holds (1e999)
      throw base::json_syntax_error(origin, error.what());
    }
    if (!repeated.empty()) {
      throw base::ConfigError(origin + ": node \"" + base::printable(repeated, 40) + "\" appears more than once");
    }
  }
  return validate_pool(root, origin);
}

const NodeConfig& pool_node(const std::vector<NodeConfig>& pool, const std::string& name,
                            const std::string& origin) {
  for (const auto& node : pool) {
    if (node.name == name) return node;
  }
  throw base::ConfigError(origin + ": no node \"" + name + "\" in the pool");
}

std::vector<NodeConfig> load_node_pool(const std::string& path) {
  return parse_node_pool(base::read_file(path), path, ends_with_toml(path));
}

}  // namespace ravnest::config
