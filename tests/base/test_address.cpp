// Address (libs/base/address.h): one set of rules for "host:port", and the reasons it gives.
#include <catch2/catch.hpp>

#include "libs/base/address.h"
#include "libs/base/config_error.h"

using ravnest::base::Address;
using ravnest::base::ConfigError;

namespace {

std::string why_not(const std::string& text,
                    Address::PortRule rule = Address::PortRule::kRequired) {
  std::string why;
  CHECK_FALSE(Address::try_parse(text, rule, &why).has_value());
  return why;
}

}  // namespace

TEST_CASE("host:port and [v6]:port parse to a host without brackets", "[address]") {
  const auto a = Address::parse("10.0.0.2:8083", "pool.json");
  CHECK(a.host() == "10.0.0.2");
  CHECK(a.port() == 8083);
  CHECK(a.str() == "10.0.0.2:8083");

  const auto b = Address::parse("[::1]:65535", "pool.json");
  CHECK(b.host() == "::1");
  CHECK(b.port() == 65535);
  CHECK(b.str() == "[::1]:65535");

  CHECK(Address::parse("node-a.lan:1", "x").host() == "node-a.lan");
  CHECK(Address::parse("[fe80::1%eth0]:80", "x").host() == "fe80::1%eth0");
}

TEST_CASE("what str() writes parses again to the same address", "[address]") {
  // Found by fuzzing (tests/fuzz/relay_lines/regression-open-line-zone-without-colon): a
  // bracketed host with a zone but no ':' was written without its brackets, which does not parse.
  for (const std::string text : {"10.0.0.2:8083", "[::1]:1", "[fe80::1%eth0]:80", "[fe80%eth0]:80",
                                 "[10.0.0.1]:9", "name_a:65535"}) {
    INFO(text);
    const auto a = Address::parse(text, "x");
    const auto again = Address::try_parse(a.str());
    REQUIRE(again.has_value());
    CHECK(again->host() == a.host());
    CHECK(again->port() == a.port());
  }
  CHECK(Address::parse("[fe80%eth0]:80", "x").str() == "[fe80%eth0]:80");
}

TEST_CASE("what is not an address says why", "[address][errors]") {
  for (const std::string bad : {"localhost", "localhost:", ":8080", "h:0", "h:65536", "h:80a",
                                "h:-1", "h:123456", "::1:80", "a b:80", "[]:80", "[::1:80",
                                "a/b:80", "h:"}) {
    INFO(bad);
    CHECK_FALSE(Address::try_parse(bad).has_value());
  }
  CHECK(why_not("localhost") == "must be host:port");
  CHECK(why_not("::1:80").find("IPv6 host in brackets") != std::string::npos);
  CHECK(why_not(":80").find("has no host") == 0);
  CHECK(why_not("a b:80") == "has an invalid character in its host");
  CHECK(why_not("h:8x") == "must end in a port number");
  CHECK(why_not("h:70000") == "has a port outside 1-65535");
  CHECK(why_not("h:0") == "has a port outside 1-65535");
}

TEST_CASE("a listen address may ask for port 0", "[address]") {
  CHECK(Address::try_parse("127.0.0.1:0", Address::PortRule::kZeroAllowed)->port() == 0);
  CHECK(why_not("127.0.0.1:70000", Address::PortRule::kZeroAllowed) ==
        "has a port outside 0-65535");
}

TEST_CASE("parse throws one line naming the origin", "[address][errors]") {
  try {
    Address::parse("h:70000", "d.toml: listen");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "d.toml: listen: \"h:70000\" has a port outside 1-65535");
  }
  try {
    Address::parse("a\nb:1", "d.toml: listen");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}
