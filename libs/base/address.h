// Address: a daemon's "host:port" or "[v6]:port", parsed once by one set of rules.
//
// Rules (those of pool.json's "IP"): the port is decimal, 1 to 65535 (0 only where the caller
// asks for a listen address, PortRule::kZeroAllowed: the kernel then picks a free port); an IPv6
// host is written in brackets; a host is not empty and holds letters, digits, '.', '-' and '_'
// (and ':' and '%' inside brackets). Anything else is refused with a short phrase saying why, so
// that pool.json, daemon.toml, --listen and the daemon's own listen all agree on what an address
// is. Pure value type: no I/O, no name resolution, usable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ravnest::base {

class Address {
 public:
  enum class PortRule {
    kRequired,      // 1-65535: an address to connect to
    kZeroAllowed,   // 0-65535: an address to listen on, 0 = a free port
  };

  // Throws ConfigError "<origin>: \"<text>\" <why>" (text made printable) when `text` breaks the
  // rules above; `origin` names the file and field (e.g. "daemon.toml: listen").
  static Address parse(const std::string& text, const std::string& origin,
                       PortRule rule = PortRule::kRequired);
  // The same rules without throwing: nullopt, with `why` (when given) set to a short phrase such
  // as "must be host:port" or "has a port outside 1-65535", for callers whose message is fixed.
  static std::optional<Address> try_parse(const std::string& text,
                                          PortRule rule = PortRule::kRequired,
                                          std::string* why = nullptr);

  // The host without brackets ("::1", "10.0.0.2", "node-a.lan").
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  // "host:port", the host in brackets when it is IPv6 or has a zone: what parse() reads back to
  // the same value.
  std::string str() const;

 private:
  Address(std::string host, uint16_t port) : host_(std::move(host)), port_(port) {}
  std::string host_;
  uint16_t port_;
};

}  // namespace ravnest::base
