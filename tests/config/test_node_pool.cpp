// Node pools: Ravnest's node_configs.json and its TOML twin, and every way they can be wrong.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"

using ravnest::base::ConfigError;
using ravnest::config::load_node_pool;
using ravnest::config::NodeConfig;
using ravnest::config::parse_node_pool;

namespace {

// The repository: ctest says where; run by hand, this file's own path tells.
std::string source_dir() {
  if (const char* dir = std::getenv("RAVNEST_SOURCE_DIR")) return dir;
  const std::string file = __FILE__;
  const auto at = file.rfind("/tests/config/");
  return at == std::string::npos ? "." : file.substr(0, at);
}

std::string temp_dir() {
  static std::string dir = [] {
    char pattern[] = "/tmp/ravnest_test_node_pool_XXXXXX";
    const char* made = ::mkdtemp(pattern);
    REQUIRE(made != nullptr);
    return std::string(made);
  }();
  return dir;
}

// The error message of parsing `text`, which must fail.
std::string error_of(const std::string& text, bool toml = false,
                     const std::string& origin = "pool.json") {
  try {
    parse_node_pool(text, origin, toml);
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);  // one line
    return message;
  }
  FAIL("expected a ConfigError for: " << text);
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One node "1" with the given body, after a valid node "0".
std::string with_node(const std::string& body) {
  return R"({"0": {"IP": "10.0.0.1:9000", "benchmarks": {"ram": 8, "bandwidth": 20}}, "1": )" +
         body + "}";
}

}  // namespace

TEST_CASE("the example pool reads from JSON", "[node_pool]") {
  const auto pool = load_node_pool(source_dir() + "/configs/node_configs.json");
  REQUIRE(pool.size() == 3);
  CHECK(pool[0].id == 0);
  CHECK(pool[0].name == "node_0");
  CHECK(pool[0].address == "127.0.0.1:8080");
  CHECK(pool[0].host == "127.0.0.1");
  CHECK(pool[0].port == 8080);
  CHECK(pool[0].ram_gb == 8);
  CHECK(pool[0].bandwidth_mbps == 20);
  CHECK(pool[0].gflops == 0);
  CHECK(pool[1].ram_gb == 16);
  CHECK(pool[1].ram_bytes() == 16e9);
  CHECK(pool[1].bandwidth_bytes_per_second() == 10e6 / 8);
  CHECK(pool[2].port == 8082);
}

TEST_CASE("JSON and TOML give equal pools", "[node_pool]") {
  const auto json = load_node_pool(source_dir() + "/configs/node_configs.json");
  const auto toml = load_node_pool(source_dir() + "/configs/node_configs.toml");
  REQUIRE(json.size() == toml.size());
  for (size_t i = 0; i < json.size(); ++i) {
    CHECK(json[i].id == toml[i].id);
    CHECK(json[i].name == toml[i].name);
    CHECK(json[i].address == toml[i].address);
    CHECK(json[i].host == toml[i].host);
    CHECK(json[i].port == toml[i].port);
    CHECK(json[i].ram_gb == toml[i].ram_gb);
    CHECK(json[i].bandwidth_mbps == toml[i].bandwidth_mbps);
    CHECK(json[i].gflops == toml[i].gflops);
  }
}

TEST_CASE("nodes come out sorted by id, with gflops and fractions", "[node_pool]") {
  const auto pool = parse_node_pool(R"({
    "10": {"IP": "h10:1", "benchmarks": {"ram": 0.5, "bandwidth": 1.5, "gflops": 12.5,
                                          "gpu_memory": 16}},
    "2": {"IP": "h2:65535", "benchmarks": {"ram": 4, "bandwidth": 100}},
    "0": {"IP": "[::1]:7000", "benchmarks": {"ram": 2, "bandwidth": 10}, "extra": "ignored"}
  })", "p.json", false);
  REQUIRE(pool.size() == 3);
  CHECK(pool[0].id == 0);
  CHECK(pool[0].host == "::1");
  CHECK(pool[0].port == 7000);
  CHECK(pool[1].id == 2);
  CHECK(pool[1].port == 65535);
  CHECK(pool[2].id == 10);
  CHECK(pool[2].name == "node_10");
  CHECK(pool[2].ram_gb == 0.5);
  CHECK(pool[2].gflops == 12.5);
  CHECK(pool[2].gpu_memory_bytes() == 16e9);
  CHECK(pool[1].gpu_memory_gb == 0);  // absent: no GPU declared
}

TEST_CASE("JSON with comments, as in Ravnest's documentation, is accepted", "[node_pool]") {
  const auto pool = parse_node_pool(R"({
    "0": {"IP": "a:1", "benchmarks": {"ram": 8, "bandwidth": 20}}
    // Add as many nodes as you need here
  })", "p.json", false);
  CHECK(pool.size() == 1);
}

TEST_CASE("TOML with floats and inline tables", "[node_pool]") {
  const auto pool = parse_node_pool(R"(
    [3]
    IP = "example.org:443"
    benchmarks = { ram = 1.5, bandwidth = 100, gflops = 3 }
  )", "p.toml", true);
  REQUIRE(pool.size() == 1);
  CHECK(pool[0].id == 3);
  CHECK(pool[0].ram_gb == 1.5);
  CHECK(pool[0].gflops == 3);
}

TEST_CASE("malformed files name the file and the parser's position", "[node_pool][errors]") {
  const std::string json = error_of("{\"0\": {\"IP\": \"a:1\",,}}", false, "cfg/nodes.json");
  CHECK(contains(json, "cfg/nodes.json: malformed JSON"));
  CHECK(contains(json, "line 1"));
  CHECK(contains(json, "column"));

  const std::string toml = error_of("[0]\nIP = \"a:1\"\nram = = 3\n", true, "cfg/nodes.toml");
  CHECK(contains(toml, "cfg/nodes.toml: malformed TOML at line 3"));
  CHECK(contains(toml, "column"));
}

TEST_CASE("structural errors", "[node_pool][errors]") {
  CHECK(contains(error_of("[1, 2]"), "pool.json: the top level must be an object"));
  CHECK(contains(error_of("{}"), "pool.json: the pool has no nodes"));
  CHECK(contains(error_of(""), "pool.json: malformed JSON"));
  CHECK(contains(error_of("", true, "p.toml"), "p.toml: the pool has no nodes"));

  const std::string key = error_of(with_node("{}").replace(with_node("{}").find("\"1\""), 3,
                                                            "\"node1\""));
  CHECK(contains(key, "pool.json: node key \"node1\" must be a non-negative integer"));
  CHECK(contains(error_of(R"({"-1": {}})"), "node key \"-1\" must be a non-negative integer"));
  CHECK(contains(error_of(R"({"1.5": {}})"), "node key \"1.5\" must be a non-negative integer"));
  CHECK(contains(error_of(R"({"": {}})"), "node key \"\" must be a non-negative integer"));
  CHECK(contains(error_of(R"({"99999999999": {}})"),
                 "node key \"99999999999\" must be a non-negative integer"));
  CHECK(contains(error_of(with_node("[]")), "pool.json: node \"1\" must be an object"));

  const std::string same_id = error_of(
      R"({"1": {"IP": "a:1", "benchmarks": {"ram": 1, "bandwidth": 1}},
          "01": {"IP": "a:2", "benchmarks": {"ram": 1, "bandwidth": 1}}})");
  CHECK(contains(same_id, "pool.json: node \"1\": id 1 is also used by node \"01\""));

  const std::string twice = error_of(
      R"({"1": {"IP": "a:1", "benchmarks": {"ram": 1, "bandwidth": 1}},
          "1": {"IP": "a:2", "benchmarks": {"ram": 1, "bandwidth": 1}}})");
  CHECK(contains(twice, "pool.json: node \"1\" appears more than once"));
  // Keys repeated deeper down are not node ids: the last one counts, as in Ravnest.
  CHECK(parse_node_pool(R"({"1": {"IP": "a:1", "benchmarks": {"ram": 1, "ram": 2, "bandwidth": 1}}})",
                        "p.json", false)[0].ram_gb == 2);
}

TEST_CASE("IP errors", "[node_pool][errors]") {
  CHECK(contains(error_of(with_node(R"({"benchmarks": {"ram": 8, "bandwidth": 20}})")),
                 "pool.json: node \"1\": IP is missing"));
  CHECK(contains(error_of(with_node(R"({"IP": 8080, "benchmarks": {"ram": 8, "bandwidth": 20}})")),
                 "pool.json: node \"1\": IP must be a string"));
  for (const std::string bad : {"localhost", "localhost:", ":8080", "h:0", "h:65536", "h:80a",
                                "h:-1", "h:123456", "::1:80", "a b:80"}) {
    const std::string message = error_of(
        with_node(R"({"IP": ")" + bad + R"(", "benchmarks": {"ram": 8, "bandwidth": 20}})"));
    CHECK(contains(message, "pool.json: node \"1\": IP \"" + bad + "\" must be \"host:port\""));
    CHECK(contains(message, "1 to 65535"));
  }
}

TEST_CASE("duplicate addresses name both nodes", "[node_pool][errors]") {
  const std::string message = error_of(
      with_node(R"({"IP": "10.0.0.1:9000", "benchmarks": {"ram": 8, "bandwidth": 20}})"));
  CHECK(contains(message, "pool.json: nodes \"0\" and \"1\" have the same IP \"10.0.0.1:9000\""));
}

TEST_CASE("benchmark errors", "[node_pool][errors]") {
  CHECK(contains(error_of(with_node(R"({"IP": "h:1"})")),
                 "pool.json: node \"1\": benchmarks is missing"));
  CHECK(contains(error_of(with_node(R"({"IP": "h:1", "benchmarks": 8})")),
                 "pool.json: node \"1\": benchmarks must be an object"));
  CHECK(contains(error_of(with_node(R"({"IP": "h:1", "benchmarks": {"bandwidth": 20}})")),
                 "pool.json: node \"1\": benchmarks.ram is missing"));
  for (const std::string bad : {"0", "-4", "\"8\"", "\"8GB\"", "true", "null", "[8]"}) {
    const std::string message = error_of(
        with_node(R"({"IP": "h:1", "benchmarks": {"ram": )" + bad + R"(, "bandwidth": 20}})"));
    CHECK(contains(message, "pool.json: node \"1\": benchmarks.ram must be a positive number"));
  }
  CHECK(contains(error_of(with_node(R"({"IP": "h:1", "benchmarks": {"ram": 8}})")),
                 "pool.json: node \"1\": benchmarks.bandwidth is missing"));
  for (const std::string bad : {"0", "-1", "\"fast\""}) {
    const std::string message = error_of(
        with_node(R"({"IP": "h:1", "benchmarks": {"ram": 8, "bandwidth": )" + bad + "}}"));
    CHECK(contains(message,
                   "pool.json: node \"1\": benchmarks.bandwidth must be a positive number"));
  }
  for (const std::string bad : {"0", "-3", "\"x\""}) {
    const std::string message = error_of(with_node(
        R"({"IP": "h:1", "benchmarks": {"ram": 8, "bandwidth": 20, "gflops": )" + bad + "}}"));
    CHECK(contains(message, "pool.json: node \"1\": benchmarks.gflops must be a positive number"));
  }
  for (const std::string bad : {"0", "-16", "\"x\""}) {
    const std::string message = error_of(with_node(
        R"({"IP": "h:1", "benchmarks": {"ram": 8, "bandwidth": 20, "gpu_memory": )" + bad + "}}"));
    CHECK(contains(message,
                   "pool.json: node \"1\": benchmarks.gpu_memory must be a positive number"));
  }
}

TEST_CASE("TOML errors name the file and field too", "[node_pool][errors]") {
  CHECK(contains(error_of("[0]\nIP = \"h:1\"\n[0.benchmarks]\nram = 0\nbandwidth = 1\n", true,
                          "pool.toml"),
                 "pool.toml: node \"0\": benchmarks.ram must be a positive number"));
  CHECK(contains(error_of("[0]\nIP = \"h:1\"\n[0.benchmarks]\nram = nan\nbandwidth = 1\n", true,
                          "pool.toml"),
                 "pool.toml: node \"0\": benchmarks.ram must be a positive number"));
  CHECK(contains(error_of("[x]\nIP = \"h:1\"\n", true, "pool.toml"),
                 "pool.toml: node key \"x\" must be a non-negative integer"));
  CHECK(contains(error_of("IP = \"h:1\"\n", true, "pool.toml"),
                 "pool.toml: node key \"IP\" must be a non-negative integer"));
}

TEST_CASE("load_node_pool reads by extension and names unreadable files", "[node_pool]") {
  const std::string dir = temp_dir();
  ravnest::base::write_file_atomically(
      dir + "/pool.TOML", "[4]\nIP = \"h:4\"\nbenchmarks = { ram = 2, bandwidth = 3 }\n");
  const auto pool = load_node_pool(dir + "/pool.TOML");
  REQUIRE(pool.size() == 1);
  CHECK(pool[0].id == 4);

  // Anything that is not .toml is read as JSON.
  ravnest::base::write_file_atomically(
      dir + "/pool.conf", R"({"5": {"IP": "h:5", "benchmarks": {"ram": 2, "bandwidth": 3}}})");
  CHECK(load_node_pool(dir + "/pool.conf")[0].id == 5);

  try {
    load_node_pool(dir + "/missing.json");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& error) {
    CHECK(std::string(error.what()) ==
          dir + "/missing.json: cannot read: No such file or directory");
  }
}

TEST_CASE("tls_fingerprint: a node's pinned certificate in any of its usual spellings",
          "[pool][pinned]") {
  const std::string hex = "3f9ac1000000000000000000000000000000000000000000000000000000abcd";
  std::string colons;
  for (size_t i = 0; i < hex.size(); i += 2) {
    colons += (i ? ":" : "") + hex.substr(i, 2);
  }
  std::string upper = colons;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const std::string& spelled :
       {hex, colons, upper, "sha256:" + hex, "SHA256 Fingerprint=" + upper,
        "sha256 Fingerprint=" + upper}) {
    INFO(spelled);
    const auto pool = parse_node_pool(with_node(R"({"IP": "10.0.0.2:9000", "benchmarks": )"
                                                R"({"ram": 8, "bandwidth": 20}, "tls_fingerprint": ")" +
                                                spelled + "\"}"),
                                      "pool.json", false);
    CHECK(pool[0].tls_fingerprint.empty());
    CHECK(pool[1].tls_fingerprint == hex);
  }
  for (const std::string& wrong :
       {std::string("\"abc\""), "\"" + hex + "0\"", "\"" + colons.substr(0, 94) + "x\"",
        "\"" + hex.substr(0, 63) + "g\"", std::string("42"), "\"md5:" + hex + "\""}) {
    INFO(wrong);
    const std::string message = error_of(with_node(R"({"IP": "10.0.0.2:9000", "benchmarks": )"
                                                   R"({"ram": 8, "bandwidth": 20}, "tls_fingerprint": )" +
                                                   wrong + "}"));
    CHECK(contains(message, "pool.json: node \"1\": tls_fingerprint must be the SHA-256 of a "
                            "certificate (64 hex digits, colons allowed), got "));
  }
  // TOML too.
  const auto toml = parse_node_pool("[0]\nIP = \"10.0.0.1:9000\"\ntls_fingerprint = \"" + hex +
                                        "\"\n[0.benchmarks]\nram = 8\nbandwidth = 20\n",
                                    "pool.toml", true);
  CHECK(toml[0].tls_fingerprint == hex);
}

TEST_CASE("pool_node finds a node by name or names the pool file") {
  const auto pool = parse_node_pool(
      R"({"0": {"IP": "10.0.0.1:9000", "benchmarks": {"ram": 8, "bandwidth": 20}},
          "5": {"IP": "10.0.0.5:9000", "benchmarks": {"ram": 8, "bandwidth": 20}}})",
      "pool.json", false);
  CHECK(pool_node(pool, "node_5", "pool.json").address == "10.0.0.5:9000");
  try {
    pool_node(pool, "node_9", "pool.json");
    FAIL("no error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()) == "pool.json: no node \"node_9\" in the pool");
  }
}
