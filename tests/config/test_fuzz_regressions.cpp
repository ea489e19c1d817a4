// The inputs the fuzzers of tests/fuzz found against libs/config, kept there as
// tests/fuzz/<target>/regression-*: each is refused with a one-line ConfigError (before the
// fixes, they crashed the parser or gave a message with a line break). The GCC build checks them
// here; scripts/fuzz replays them with the sanitizers.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/daemon/daemon_config.h"
#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"
#include "tests/support/test_env.h"

using namespace ravnest;
using namespace ravnest::config;
using namespace ravnest::base;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> regressions(const std::string& target) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(fs::path(ravnest::test::source_dir()) /
                                                  "tests" / "fuzz" / target)) {
    if (entry.path().filename().string().rfind("regression-", 0) == 0) out.push_back(entry.path());
  }
  REQUIRE(!out.empty());
  return out;
}

// The message of the ConfigError that `parse` throws, one line.
std::string refusal(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find('\r') == std::string::npos);
    return message;
  }
  FAIL("accepted");
  return "";
}

// The same for the text of a file.
std::string refusal(const fs::path& file, const std::function<void(const std::string&)>& parse) {
  INFO(file.string());
  const std::string text = base::read_file(file.string());
  return refusal([&] { parse(text); });
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("fuzz regressions: node pools", "[fuzz]") {
  for (const auto& file : regressions("node_pool_json")) {
    refusal(file, [](const std::string& text) { parse_node_pool(text, "p.json", false); });
  }
  for (const auto& file : regressions("node_pool_toml")) {
    refusal(file, [](const std::string& text) { parse_node_pool(text, "p.toml", true); });
  }
  // A number beyond a double: nlohmann's out_of_range escaped as a non-ConfigError.
  CHECK(contains(refusal([] {
                   parse_node_pool("{\"0\": {\"IP\": \"a:1\", \"benchmarks\": {\"ram\": 1e999}}}",
                                   "p.json", false);
                 }),
                 "p.json: malformed JSON: number overflow"));
}

TEST_CASE("fuzz regressions: node metadata", "[fuzz]") {
  for (const auto& file : regressions("node_metadata")) {
    refusal(file, [](const std::string& text) { node_metadata_from_json(text, "m.json"); });
  }
  const fs::path dir = fs::path(ravnest::test::source_dir()) / "tests" / "fuzz" / "node_metadata";
  auto parse = [](const std::string& text) { node_metadata_from_json(text, "m.json"); };
  CHECK(refusal(dir / "regression-address-key-overflow.json", parse) ==
        "m.json: addresses.99999999999: key must be a node id");
  CHECK(refusal(dir / "regression-ring-without-peers.json", parse) ==
        "m.json: rings[0].peers: must not be empty");
  CHECK(contains(refusal(dir / "regression-ring-position-outside.json", parse),
                 "m.json: rings[0].position: must index peers (0 to 2), got 7"));
}

TEST_CASE("fuzz regressions: job files and daemon configs", "[fuzz]") {
  for (const auto& file : regressions("job_spec")) {
    refusal(file, [](const std::string& text) { parse_job(text, "job.toml"); });
  }
  for (const auto& file : regressions("daemon_config")) {
    refusal(file, [](const std::string& text) { parse_daemon_config(text, "d.toml"); });
  }
  // toml++ quotes the offending input; a line break there is shown escaped.
  CHECK(refusal([] { parse_daemon_config("a = tru\n", "d.toml"); }) ==
        "d.toml: malformed TOML at line 1, column 8: Error while parsing boolean: expected 'true', "
        "saw 'tru\\x0a'");
}
