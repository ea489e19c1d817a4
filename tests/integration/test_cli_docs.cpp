// The .deb's generated documentation against the programs themselves (packaging/generate/): every
// option of every subcommand that `--dump-options` lists is offered by the bash completion after
// that subcommand and named in its man page; and a misspelt command or option gets the nearest
// known one in one line, exit 2. Fast: no daemon, no cpack (test_packaging checks the package).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string ravnest_bin() { return test::binary_dir() + "/apps/ravnest/ravnest"; }
std::string ravnestd_bin() { return test::binary_dir() + "/apps/ravnestd/ravnestd"; }
fs::path generated() { return fs::path(test::binary_dir()) / "packaging/generated"; }

nlohmann::json dump_options(const std::string& program) {
  auto dumped = test::run_command(program + " --dump-options");
  INFO(dumped.err);
  REQUIRE(dumped.exit_code == 0);
  return nlohmann::json::parse(dumped.out);
}

// The words completion offers after `words` with the current word `cur`.
std::string complete(const std::string& function, const std::vector<std::string>& words,
                     const std::string& cur) {
  std::string array;
  for (const auto& word : words) array += "'" + word + "' ";
  array += "'" + cur + "'";
  auto result = test::run_command(
      "bash -c 'source \"$0\" && COMP_WORDS=(" + array + ") && COMP_CWORD=" +
      std::to_string(words.size()) + " && " + function + " && echo \" ${COMPREPLY[*]} \"' " +
      (generated() / "ravnest.bash-completion").string());
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  return result.out;
}

std::string zcat(const fs::path& page) {
  REQUIRE(fs::exists(page));
  auto text = test::run_command("zcat " + page.string());
  REQUIRE(text.exit_code == 0);
  return text.out;
}

// Options as roff writes them: every '-' is '\-'.
std::string roff(const std::string& name) {
  std::string out;
  for (char c : name) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

void check_command(const std::string& function, const nlohmann::json& command,
                   std::vector<std::string> words, const std::string& man_text) {
  const std::string offered = complete(function, words, "-");
  for (const auto& option : command["options"]) {
    for (const auto& name : option["names"]) {
      const std::string n = name.get<std::string>();
      INFO(function << " after '" << words.back() << "': " << n);
      CHECK(offered.find(" " + n + " ") != std::string::npos);
      CHECK(man_text.find("\\fB" + roff(n) + "\\fR") != std::string::npos);
    }
  }
  for (const auto& sub : command["subcommands"]) {
    INFO(sub["name"]);
    CHECK(complete(function, words, "").find(" " + sub["name"].get<std::string>() + " ") !=
          std::string::npos);
    auto deeper = words;
    deeper.push_back(sub["name"].get<std::string>());
    check_command(function, sub, deeper, man_text);
  }
}

}  // namespace

TEST_CASE("every option is in the completion and the man pages", "[cli_docs]") {
  const auto ravnest = dump_options(ravnest_bin());
  REQUIRE(ravnest["subcommands"].size() >= 12);
  std::vector<std::string> names;
  for (const auto& command : ravnest["subcommands"]) {
    const std::string name = command["name"];
    names.push_back(name);
    const auto page = zcat(generated() / "man/man1" / ("ravnest-" + name + ".1.gz"));
    CHECK(page.find(".TH \"RAVNEST-") != std::string::npos);
    check_command("_ravnest", command, {"ravnest", name}, page);
  }
  // Hidden commands stay hidden; the ones a user asked for are there.
  CHECK(std::find(names.begin(), names.end(), "probe-memory") == names.end());
  for (const char* wanted : {"clusterize", "train", "replace", "bench"}) {
    CHECK(std::find(names.begin(), names.end(), wanted) != names.end());
  }
  CHECK(complete("_ravnest", {"ravnest", "replace"}, "--w") == " --with \n");
  CHECK(complete("_ravnest", {"ravnest", "clusterize", "--mode"}, "p") == " pipeline ps \n");

  const auto top = zcat(generated() / "man/man1/ravnest.1.gz");
  for (const auto& name : names) CHECK(top.find("ravnest\\-" + roff(name)) != std::string::npos);
  CHECK(top.find("\\fBravnest\\-job\\fR(5)") != std::string::npos);

  const auto ravnestd = dump_options(ravnestd_bin());
  const auto daemon_page = zcat(generated() / "man/man8/ravnestd.8.gz");
  CHECK(daemon_page.find(".TH \"RAVNESTD\" \"8\"") != std::string::npos);
  check_command("_ravnestd", ravnestd, {"ravnestd"}, daemon_page);
  CHECK(complete("_ravnestd", {"ravnestd"}, "--dev") == " --device \n");

  // The job file's page, from docs/job-file.md: its tables' keys are tags.
  const auto job = zcat(generated() / "man/man5/ravnest-job.5.gz");
  CHECK(job.find(".TH \"RAVNEST-JOB\" \"5\"") != std::string::npos);
  for (const char* key : {"micro_batches", "update_frequency", "batch_size"}) {
    CHECK(job.find(".TP\n\\fB" + std::string(key) + "\\fR\n") != std::string::npos);
  }
  auto warnings = test::run_command("zcat " + (generated() / "man/man5/ravnest-job.5.gz").string() +
                                    " | LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l - 2>&1 "
                                    ">/dev/null");
  if (warnings.exit_code == 0) CHECK(warnings.out.empty());
}

TEST_CASE("a misspelt command or option names the nearest one", "[cli_docs]") {
  auto typo = test::run_command(ravnest_bin() + " trian job.toml");
  CHECK(typo.exit_code == 2);
  CHECK(typo.err == "ravnest: unknown command \"trian\"; did you mean \"train\"?\n");
  CHECK(typo.out.empty());

  auto unknown = test::run_command(ravnest_bin() + " deploy");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err == "ravnest: unknown command \"deploy\" (`ravnest --help` lists them)\n");

  auto option = test::run_command(ravnest_bin() + " replace node_1 --wiht node_9");
  CHECK(option.exit_code == 2);
  CHECK(option.err == "ravnest replace: unknown option \"--wiht\"; did you mean \"--with\"?\n");

  auto nested = test::run_command(ravnest_bin() + " bench allreduce --nodse 3");
  CHECK(nested.exit_code == 2);
  CHECK(nested.err ==
        "ravnest bench allreduce: unknown option \"--nodse\"; did you mean \"--nodes\"?\n");

  auto daemon = test::run_command(ravnestd_bin() + " --devcie cuda");
  CHECK(daemon.exit_code == 2);
  CHECK(daemon.err == "ravnestd: unknown option \"--devcie\"; did you mean \"--device\"?\n");

  // CLI11's own errors stay where nothing is unknown: a missing required option.
  auto missing = test::run_command(ravnest_bin() + " replace node_1");
  CHECK(missing.exit_code != 0);
  CHECK(missing.exit_code != 2);
  CHECK(missing.err.find("--with") != std::string::npos);
}
