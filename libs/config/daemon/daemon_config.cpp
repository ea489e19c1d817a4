#include "libs/config/daemon/daemon_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include <toml++/toml.h>

#include "libs/base/address.h"
#include "libs/base/atomic_file.h"
#include "libs/base/byte_size.h"
#include "libs/base/config_error.h"
#include "libs/base/nearest_name.h"
#include "libs/config/daemon/daemon_limits.h"
#include "libs/base/printable.h"
#include "libs/base/toml_error.h"

namespace ravnest::config {
namespace {

constexpr std::array<std::string_view, 12> kKeys = {"node",        "listen",   "data_dir",
                                                    "log_level",   "log_file", "secret_file",
                                                    "tls_cert",    "tls_key",  "device",
                                                    "tracker",     "relay",    "offer_relay"};
constexpr std::array<std::string_view, 7> kLevels = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};

std::string known_keys() {
  std::string out;
  for (auto key : kKeys) out += (out.empty() ? "" : ", ") + std::string(key);
  return out;
}

std::string limit_keys() {
  std::string out;
  for (const auto& key : kDaemonLimitKeys) out += (out.empty() ? "" : ", ") + std::string(key.name);
  return out;
}

void parse_limits(const toml::node& node, const std::string& origin, DaemonLimits& limits);

std::string type_of(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

void parse_limits(const toml::node& node, const std::string& origin, DaemonLimits& limits) {
  const auto* table = node.as_table();
  if (!table) throw base::ConfigError(origin + ": limits: must be a table ([limits])");
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    const auto* known = std::find_if(kDaemonLimitKeys.begin(), kDaemonLimitKeys.end(),
                                     [&](const DaemonLimitKey& k) { return k.name == name; });
    if (known == kDaemonLimitKeys.end()) {
      std::vector<std::string> names;
      for (const auto& key : kDaemonLimitKeys) names.emplace_back(key.name);
      throw base::ConfigError(origin + ": unknown key \"limits." + base::printable(name) +
                        "\" (known keys of [limits]: " + limit_keys() + ")" +
                        base::did_you_mean(name, names));
    }
    const auto* integer = value.as_integer();
    const int64_t v = integer ? integer->get() : -1;
    if (!integer || v < 0 || static_cast<uint64_t>(v) < known->minimum ||
        static_cast<uint64_t>(v) > known->maximum) {
      throw base::ConfigError(origin + ": limits." + name + ": must be an integer from " +
                        std::to_string(known->minimum) + " to " + std::to_string(known->maximum) +
                        ", got " + (integer ? std::to_string(v) : type_of(value)));
    }
    limits.*(known->field) = static_cast<uint64_t>(v);
  }
}

void check_listen(const std::string& listen, const std::string& origin) {
  if (!listen.empty()) base::Address::parse(listen, origin + ": listen");
}

void check_values(const DaemonConfig& config, const std::string& origin, bool need_node) {
  if (need_node && config.node.empty()) {
    throw base::ConfigError(origin + ": node: missing (set node = \"node_<id>\" or pass --node)");
  }
  // The name reaches log lines and messages: a line break in it could forge a log line.
  const bool plain_name =
      config.node.size() <= 64 &&
      std::all_of(config.node.begin(), config.node.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-' || c == '.';
      });
  if (!plain_name) {
    throw base::ConfigError(origin + ": node: \"" + base::printable(config.node, 64) +
                      "\" is not a node name (node_<id>: letters, digits, '_', '-' and '.', at "
                      "most 64)");
  }
  check_listen(config.listen, origin);
  if (config.data_dir.empty()) throw base::ConfigError(origin + ": data_dir: must not be empty");
  if (!is_log_level(config.log_level)) {
    throw base::ConfigError(origin + ": log_level: \"" + base::printable(config.log_level) +
                      "\" is not one of trace, debug, info, warn, error, critical, off");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    throw base::ConfigError(origin + ": " + (config.tls_cert.empty() ? "tls_cert" : "tls_key") +
                      ": missing (tls_cert and tls_key go together)");
  }
  if (!parse_device(config.device)) {
    throw base::ConfigError(origin + ": device: \"" + base::printable(config.device) +
                      "\" is not cpu, cuda or cuda:N");
  }
  // Each address alone; what they need of each other (relay = "auto" and a tracker, not relay
  // and offer_relay both) is validate_daemon_config's, once the flags are merged in.
  if (!config.tracker.empty()) base::Address::parse(config.tracker, origin + ": tracker");
  if (!config.relay.empty() && config.relay != kRelayAuto) {
    base::Address::parse(config.relay, origin + ": relay");
  }
  if (!config.offer_relay.empty()) {
    base::Address::parse(config.offer_relay, origin + ": offer_relay",
                         base::Address::PortRule::kZeroAllowed);
  }
}

}  // namespace

std::optional<DeviceName> parse_device(const std::string& text) {
  if (text == "cpu") return DeviceName{false, -1};
  if (text == "cuda") return DeviceName{true, -1};
  const std::string prefix = "cuda:";
  if (text.size() <= prefix.size() || text.size() > prefix.size() + 4 ||
      text.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = text.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return DeviceName{true, std::stoi(digits)};
}

int64_t parse_memory_limit(const std::string& text, const std::string& where) {
  const std::string shown = "\"" + base::printable(text, 64) + "\"";
  const std::string otherwise =
      " (give a size above 0, or none: the budget is then the cgroup's limit or the machine's "
      "RAM)";
  if (!text.empty() && text.front() == '-') {
    throw base::ConfigError(where + ": " + shown + " is negative" + otherwise);
  }
  std::string why;
  const auto bytes = base::parse_byte_size(text, &why);
  if (!bytes) throw base::ConfigError(where + ": " + shown + " " + why);
  if (*bytes == 0) throw base::ConfigError(where + ": " + shown + " is no budget" + otherwise);
  return *bytes;
}

bool is_log_level(const std::string& level) {
  return std::find(kLevels.begin(), kLevels.end(), level) != kLevels.end();
}

DaemonConfig parse_daemon_config(const std::string& text, const std::string& origin) {
  toml::table table = base::parse_toml(text, origin);
  DaemonConfig config;
  for (const auto& [key, value] : table) {
    const std::string name(key.str());
    if (name == "limits") {
      parse_limits(value, origin, config.limits);
      continue;
    }
    if (name == "threads") {
      const auto* integer = value.as_integer();
      if (!integer) {
        throw base::ConfigError(origin + ": threads: must be an integer, got " + type_of(value));
      }
      if (integer->get() < 0 || integer->get() > kMaxThreads) {
        throw base::ConfigError(origin + ": threads: " + std::to_string(integer->get()) +
                          " is outside [0, " + std::to_string(kMaxThreads) +
                          "] (0: the cores divided among the daemons on this host)");
      }
      config.threads = static_cast<int>(integer->get());
      continue;
    }
    if (name == "memory_limit") {
      if (const auto* integer = value.as_integer()) {
        config.memory_limit = parse_memory_limit(std::to_string(integer->get()),
                                                 origin + ": memory_limit");
      } else if (const auto* string = value.as_string()) {
        config.memory_limit = parse_memory_limit(string->get(), origin + ": memory_limit");
      } else {
        throw base::ConfigError(origin + ": memory_limit: must be a number of bytes or a string such "
                          "as \"600MiB\", got " + type_of(value));
      }
      continue;
    }
    if (name == "shared_memory") {
      const auto* flag = value.as_boolean();
      if (!flag) {
        throw base::ConfigError(origin + ": shared_memory: must be true or false, got " +
                          type_of(value));
      }
      config.shared_memory = flag->get();
      continue;
    }
    if (std::find(kKeys.begin(), kKeys.end(), name) == kKeys.end()) {
      std::vector<std::string> known(kKeys.begin(), kKeys.end());
      known.insert(known.end(), {"threads", "shared_memory", "memory_limit", "limits"});
      throw base::ConfigError(origin + ": unknown key \"" + base::printable(name) + "\" (known keys: " +
                        known_keys() + ", threads, shared_memory, memory_limit, [limits])" +
                        base::did_you_mean(name, known));
    }
    const auto* string = value.as_string();
    if (!string) {
      throw base::ConfigError(origin + ": " + name + ": must be a string, got " + type_of(value));
    }
    const std::string& text_value = string->get();
    if (name == "node") config.node = text_value;
    else if (name == "listen") config.listen = text_value;
    else if (name == "data_dir") config.data_dir = text_value;
    else if (name == "log_level") config.log_level = text_value;
    else if (name == "log_file") config.log_file = text_value;
    else if (name == "secret_file") config.secret_file = text_value;
    else if (name == "tls_cert") config.tls_cert = text_value;
    else if (name == "tls_key") config.tls_key = text_value;
    else if (name == "device") config.device = text_value;
    else if (name == "tracker") config.tracker = text_value;
    else if (name == "relay") config.relay = text_value;
    else if (name == "offer_relay") config.offer_relay = text_value;
  }
  check_values(config, origin, /*need_node=*/false);
  return config;
}

DaemonConfig load_daemon_config(const std::string& toml_path) {
  return parse_daemon_config(base::read_file(toml_path), toml_path);
}

DaemonConfig merge(DaemonConfig file, const DaemonConfigOverrides& flags) {
  if (flags.node) file.node = *flags.node;
  if (flags.listen) file.listen = *flags.listen;
  if (flags.data_dir) file.data_dir = *flags.data_dir;
  if (flags.log_level) file.log_level = *flags.log_level;
  if (flags.log_file) file.log_file = *flags.log_file;
  if (flags.secret_file) file.secret_file = *flags.secret_file;
  if (flags.tls_cert) file.tls_cert = *flags.tls_cert;
  if (flags.tls_key) file.tls_key = *flags.tls_key;
  if (flags.insecure) file.insecure = true;
  if (flags.threads) file.threads = *flags.threads;
  if (flags.device) file.device = *flags.device;
  if (flags.no_shared_memory) file.shared_memory = false;
  if (flags.memory_limit) file.memory_limit = *flags.memory_limit;
  if (flags.tracker) file.tracker = *flags.tracker;
  if (flags.relay) file.relay = *flags.relay;
  if (flags.offer_relay) file.offer_relay = *flags.offer_relay;
  return file;
}

void validate_daemon_config(const DaemonConfig& config, const std::string& origin) {
  check_values(config, origin, /*need_node=*/true);
  if (config.threads < 0 || config.threads > kMaxThreads) {
    throw base::ConfigError(origin + ": threads: " + std::to_string(config.threads) +
                      " is outside [0, " + std::to_string(kMaxThreads) + "]");
  }
  if (config.memory_limit < 0) {
    throw base::ConfigError(origin + ": memory_limit: " + std::to_string(config.memory_limit) +
                      " is negative");
  }
  if (config.relay == kRelayAuto && config.tracker.empty()) {
    throw base::ConfigError(origin + ": relay: \"auto\" asks the tracker whether this daemon "
                            "can be reached: it needs a tracker (--tracker)");
  }
  if (!config.relay.empty() && !config.offer_relay.empty()) {
    throw base::ConfigError(origin + ": offer_relay: a daemon behind a relay (relay = \"" +
                            config.relay + "\") cannot be reached to relay for others");
  }
  if (config.insecure && !config.tls_cert.empty()) {
    throw base::ConfigError(origin + ": tls_cert: a certificate with --insecure (no TLS) would be ignored");
  }
}

}  // namespace ravnest::config
