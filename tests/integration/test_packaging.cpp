// The .deb (packaging/CMakeLists.txt, CPack): it builds from this build tree, declares the Debian
// libraries the binaries need, holds the programs, the unit, the sysusers file, the example
// configuration, the docs, the examples, the copyright, the man pages and the shell completion;
// the unit it installs passes `systemd-analyze verify` in the unpacked tree, and lintian finds no
// error in the package. No apt: the package is unpacked with
// `dpkg -x` (installing needs root and a Debian root to install into).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "ravnest_version.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

bool have(const std::string& program) {
  return test::run_command("command -v " + program + " >/dev/null").exit_code == 0;
}

}  // namespace

TEST_CASE("the .deb holds everything a provider installs", "[packaging]") {
  test::TempDir dir;
  const std::string deb_dir = (dir.path() / "deb").string();
  auto packed = test::run_command("cd " + test::binary_dir() + " && cpack -G DEB -B " + deb_dir, 600);
  INFO(packed.out << packed.err);
  REQUIRE(packed.exit_code == 0);
  const std::string deb = deb_dir + "/ravnest_" RAVNEST_VERSION "_amd64.deb";
  REQUIRE(fs::exists(deb));

  auto info = test::run_command("dpkg-deb --info " + deb);
  INFO(info.out);
  REQUIRE(info.exit_code == 0);
  CHECK(info.out.find(" Package: ravnest\n") != std::string::npos);
  CHECK(info.out.find(" Version: " RAVNEST_VERSION "\n") != std::string::npos);
  CHECK(info.out.find(" Architecture: amd64\n") != std::string::npos);
  // Found by dpkg-shlibdeps in the binaries: the Debian packages of LibTorch, Cap'n Proto, OpenSSL.
  for (const char* library : {"libtorch1.13", "libcapnp-0.9.2", "libssl3", "libsystemd0"}) {
    CHECK(info.out.find(library) != std::string::npos);
  }
  CHECK(info.out.find("postinst") != std::string::npos);

  auto contents = test::run_command("dpkg-deb -c " + deb);
  REQUIRE(contents.exit_code == 0);
  for (const char* path :
       {"./usr/bin/ravnest", "./usr/bin/ravnestd", "./usr/lib/ravnest/ravnest-tracker",
        "./usr/lib/systemd/system/ravnestd.service",
        "./usr/lib/systemd/system/ravnest-tracker.service",
        "./usr/lib/sysusers.d/ravnest.conf", "./etc/ravnest/ravnestd.toml.example",
        "./usr/share/doc/ravnest/docs/security.md", "./usr/share/doc/ravnest/docs/job-file.md",
        "./usr/share/man/man1/ravnest.1.gz", "./usr/share/man/man1/ravnest-train.1.gz",
        "./usr/share/man/man1/ravnest-replace.1.gz", "./usr/share/man/man5/ravnest-job.5.gz",
        "./usr/share/man/man8/ravnestd.8.gz", "./usr/share/doc/ravnest/copyright",
        "./usr/share/doc/ravnest/changelog.gz",
        "./usr/share/doc/ravnest/examples/job_digits.toml",
        "./usr/share/doc/ravnest/examples/node_configs.json",
        "./usr/share/doc/ravnest/examples/ps/job.toml",
        "./usr/lib/python3/dist-packages/ravnest/__init__.py",
        "./usr/share/bash-completion/completions/ravnest",
        "./usr/share/bash-completion/completions/ravnestd"}) {
    INFO(path);
    CHECK(contents.out.find(std::string(path) + "\n") != std::string::npos);
  }

  const fs::path root = dir.path() / "root";
  REQUIRE(test::run_command("dpkg -x " + deb + " " + root.string()).exit_code == 0);
  const auto unit = test::read_text(root / "usr/lib/systemd/system/ravnestd.service");
  CHECK(unit.find("ExecStart=/usr/bin/ravnestd --config /etc/ravnest/ravnestd.toml\n") !=
        std::string::npos);
  auto version = test::run_command((root / "usr/bin/ravnestd").string() + " --version");
  CHECK(version.exit_code == 0);
  CHECK(version.out.rfind("ravnestd " RAVNEST_VERSION " (commit ", 0) == 0);
  // The tracker `ravnest tracker` becomes (commands/tracker.cpp), without LibTorch.
  auto tracker = test::run_command((root / "usr/lib/ravnest/ravnest-tracker").string() +
                                   " --version");
  CHECK(tracker.exit_code == 0);
  CHECK(tracker.out.rfind("ravnest-tracker " RAVNEST_VERSION, 0) == 0);
  auto linked = test::run_command("ldd " + (root / "usr/lib/ravnest/ravnest-tracker").string());
  CHECK(linked.out.find("libtorch") == std::string::npos);
  // Generated from --dump-options (packaging/generate/; test_cli_docs checks every option).
  auto man = test::run_command("zcat " + (root / "usr/share/man/man1/ravnest.1.gz").string());
  CHECK(man.out.find(".TH \"RAVNEST\" \"1\"") != std::string::npos);
  CHECK(man.out.find("ravnest\\-clusterize") != std::string::npos);
  // The copyright file is machine-readable (DEP-5).
  const auto copyright = test::read_text(root / "usr/share/doc/ravnest/copyright");
  const std::string dep5 =
      "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/";
  CHECK(copyright.rfind(dep5 + "\n", 0) == 0);
  CHECK(info.out.find("conffiles") != std::string::npos);
  auto completion = test::run_command(
      "bash -c 'source " + (root / "usr/share/bash-completion/completions/ravnest").string() +
      " && COMP_WORDS=(ravnest los) COMP_CWORD=1 && _ravnest && echo \"${COMPREPLY[*]}\"'");
  CHECK(completion.out == "losses\n");

  // Debian's own checks: no error (warnings are listed in packaging/README.md).
  if (have("lintian")) {
    auto lint = test::run_command("lintian --no-cfg --fail-on error " + deb, 300);
    INFO(lint.out << lint.err);
    CHECK(lint.exit_code == 0);
    CHECK(lint.out.find("\nE: ") == std::string::npos);
    CHECK(lint.out.rfind("E: ", 0) != 0);
  } else {
    WARN("lintian is not installed (scripts/bootstrap installs it): the .deb is not linted");
  }

  if (!have("systemd-analyze")) {
    WARN("systemd-analyze is not installed: the unit is not verified");
    return;
  }
  // systemd-analyze resolves the unit's dependencies (sysinit.target, ...) in the same root.
  REQUIRE(test::run_command("cp -rn /usr/lib/systemd/system/. " +
                            (root / "usr/lib/systemd/system").string() + "/").exit_code == 0);
  auto verify = test::run_command("systemd-analyze verify --root=" + root.string() + " " +
                                  (root / "usr/lib/systemd/system/ravnestd.service").string());
  INFO(verify.out << verify.err);
  CHECK(verify.exit_code == 0);
  CHECK(verify.err.empty());  // no warning either (an unknown key is only a warning)
}
