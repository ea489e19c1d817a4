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

struct Completion {
  std::string function;  // _ravnest or _ravnestd
  std::vector<std::string> words;  // before the current one
  std::string cur;
};

// What completion offers for each query (" word word "), all in one bash process: a bash per
// query made this test take 20 s.
std::vector<std::string> complete(const std::vector<Completion>& queries) {
  test::TempDir dir;
  std::string script = "source '" + (generated() / "ravnest.bash-completion").string() + "'\n";
  for (const auto& query : queries) {
    script += "COMP_WORDS=(";
    for (const auto& word : query.words) script += "'" + word + "' ";
    script += "'" + query.cur + "'); COMP_CWORD=" + std::to_string(query.words.size()) +
              "; COMPREPLY=(); " + query.function + "; echo \" ${COMPREPLY[*]} \"\n";
  }
  test::write_text(dir / "complete.sh", script);
  auto result = test::run_command("bash " + (dir / "complete.sh").string());
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = result.out.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(result.out.substr(start, end - start));
  }
  REQUIRE(lines.size() == queries.size());
  return lines;
}

std::string complete(const std::string& function, const std::vector<std::string>& words,
                     const std::string& cur) {
  return complete({{function, words, cur}}).front() + "\n";
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

// Every command of `program` (the JSON of --dump-options) with the words that reach it.
void walk(const std::string& function, const nlohmann::json& command,
          const std::vector<std::string>& words,
          std::vector<std::pair<const nlohmann::json*, std::vector<std::string>>>& out) {
  out.emplace_back(&command, words);
  for (const auto& sub : command["subcommands"]) {
    auto deeper = words;
    deeper.push_back(sub["name"].get<std::string>());
    walk(function, sub, deeper, out);
  }
}

// Completion after the command's words offers each of its options ("-") and subcommands (""),
// and the man page names each option in bold.
void check_command(const std::string& function, const nlohmann::json& command,
                   const std::vector<std::string>& words, const std::string& man_text) {
  std::vector<std::pair<const nlohmann::json*, std::vector<std::string>>> commands;
  walk(function, command, words, commands);
  std::vector<Completion> queries;
  for (const auto& [json, reach] : commands) {
    queries.push_back({function, reach, "-"});
    queries.push_back({function, reach, ""});
  }
  const auto offered = complete(queries);
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const auto& [json, reach] = commands[i];
    for (const auto& option : (*json)["options"]) {
      for (const auto& name : option["names"]) {
        const std::string n = name.get<std::string>();
        INFO(function << " after '" << reach.back() << "': " << n);
        CHECK(offered[2 * i].find(" " + n + " ") != std::string::npos);
        CHECK(man_text.find("\\fB" + roff(n) + "\\fR") != std::string::npos);
      }
    }
    for (const auto& sub : (*json)["subcommands"]) {
      INFO(function << " after '" << reach.back() << "': " << sub["name"]);
      CHECK(offered[2 * i + 1].find(" " + sub["name"].get<std::string>() + " ") !=
            std::string::npos);
    }
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
