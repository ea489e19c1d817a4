#include "libs/base/address.h"

#include <cctype>

#include "libs/base/config_error.h"
#include "libs/base/printable.h"

namespace ravnest::base {
namespace {

bool host_char(unsigned char c, bool bracketed) {
  if (std::isalnum(c) || c == '.' || c == '-' || c == '_') return true;
  return bracketed && (c == ':' || c == '%');  // IPv6, with a zone ("fe80::1%eth0")
}

}  // namespace

std::optional<Address> Address::try_parse(const std::string& text, PortRule rule,
                                          std::string* why) {
  const auto fail = [&](const char* reason) -> std::optional<Address> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return fail("must be host:port");
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  bool bracketed = false;
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return fail("must be host:port");
    host = host.substr(1, host.size() - 2);
    bracketed = true;
  } else if (host.find(':') != std::string::npos) {
    return fail("must be host:port (write an IPv6 host in brackets, e.g. [::1]:8080)");
  }
  if (host.empty()) return fail("has no host (use 0.0.0.0 to listen on every interface)");
  for (unsigned char c : host) {
    if (!host_char(c, bracketed)) return fail("has an invalid character in its host");
  }
  if (port.empty() || port.size() > 5) return fail("must end in a port number");
  for (unsigned char c : port) {
    if (!std::isdigit(c)) return fail("must end in a port number");
  }
  const long number = std::stol(port);
  if (rule == PortRule::kRequired && (number < 1 || number > 65535)) {
    return fail("has a port outside 1-65535");
  }
  if (number > 65535) return fail("has a port outside 0-65535");
  return Address(std::move(host), static_cast<uint16_t>(number));
}

Address Address::parse(const std::string& text, const std::string& origin, PortRule rule) {
  std::string why;
  auto address = try_parse(text, rule, &why);
  if (!address) throw ConfigError(origin + ": \"" + printable(text) + "\" " + why);
  return *address;
}

std::string Address::str() const {
  const std::string port = std::to_string(port_);
  // A zone ('%') is only allowed in brackets: "[fe80%eth0]:80" written without them would not
  // parse again.
  if (host_.find_first_of(":%") != std::string::npos) return "[" + host_ + "]:" + port;
  return host_ + ":" + port;
}

}  // namespace ravnest::base
