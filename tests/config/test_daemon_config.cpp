// The daemon's configuration file, its shared secret, safe file names under the data directory,
// and sd_notify.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "libs/base/config_error.h"
#include "libs/config/daemon/daemon_config.h"
#include "libs/base/safe_path.h"
#include "libs/base/secret.h"
#include "libs/daemon/systemd_notify.h"

using namespace ravnest;
using namespace ravnest::config;
using namespace ravnest::daemon;
using namespace ravnest::base;
namespace fs = std::filesystem;

namespace {

// A fresh directory, removed on destruction (this binary links no test support library).
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "ravnest-config-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path write(const fs::path& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string source_dir() {
  const char* dir = std::getenv("RAVNEST_SOURCE_DIR");
  return dir ? dir : "";
}

}  // namespace

TEST_CASE("daemon config: defaults, a full file and the example", "[config][daemon]") {
  auto empty = parse_daemon_config("", "empty.toml");
  CHECK(empty.node.empty());
  CHECK(empty.listen.empty());
  CHECK(empty.data_dir == "/var/lib/ravnest");
  CHECK(empty.log_level == "info");
  CHECK(empty.log_file.empty());
  CHECK(empty.secret_file.empty());

  auto full = parse_daemon_config(R"(
node = "node_3"
listen = "10.0.0.4:8083"
data_dir = "/srv/ravnest"
log_level = "debug"
log_file = "/var/log/ravnest/ravnestd.log"
secret_file = "/etc/ravnest/secret"
threads = 3
device = "cuda:1"
shared_memory = false
)",
                                  "full.toml");
  CHECK(full.threads == 3);
  CHECK(full.device == "cuda:1");
  CHECK(empty.device == "cpu");
  CHECK(empty.threads == 0);
  CHECK(empty.shared_memory);
  CHECK_FALSE(full.shared_memory);
  CHECK(full.node == "node_3");
  CHECK(full.listen == "10.0.0.4:8083");
  CHECK(full.data_dir == "/srv/ravnest");
  CHECK(full.log_level == "debug");
  CHECK(full.log_file == "/var/log/ravnest/ravnestd.log");
  CHECK(full.secret_file == "/etc/ravnest/secret");
  CHECK_NOTHROW(validate_daemon_config(full, "full.toml"));

  CHECK(parse_daemon_config("listen = \"[::1]:9000\"", "v6.toml").listen == "[::1]:9000");

  if (!source_dir().empty()) {
    auto example = load_daemon_config(source_dir() + "/configs/ravnestd.toml");
    CHECK(example.node == "node_0");
    CHECK_NOTHROW(validate_daemon_config(example, "example"));
  }
}

TEST_CASE("daemon config: errors name the file and the field", "[config][daemon]") {
  CHECK(error_of([] { parse_daemon_config("lsiten = \"a:1\"", "d.toml"); }) ==
        "d.toml: unknown key \"lsiten\" (known keys: node, listen, data_dir, log_level, "
        "log_file, secret_file, tls_cert, tls_key, device, tracker, relay, offer_relay, threads, "
        "shared_memory, "
        "memory_limit, [limits]); did you mean \"listen\"?");
  CHECK(error_of([] {
          auto config = parse_daemon_config("node = \"node_0\"\ntracker = \"10.0.0.1\"", "d.toml");
          validate_daemon_config(config, "d.toml");
        }).rfind("d.toml: tracker: \"10.0.0.1\"", 0) == 0);
  CHECK(parse_daemon_config("tracker = \"10.0.0.1:8090\"", "d.toml").tracker == "10.0.0.1:8090");
  CHECK(parse_daemon_config("relay = \"10.0.0.1:9000\"", "d.toml").relay == "10.0.0.1:9000");
  CHECK(parse_daemon_config("relay = \"auto\"", "d.toml").relay == "auto");  // --tracker may come
  // Each address is checked as the file is read (the fuzzer's finding: a relay that is no
  // address parsed, and only validate_daemon_config refused it).
  CHECK(error_of([] { parse_daemon_config("relay = \"enst\"", "d.toml"); })
            .rfind("d.toml: relay: \"enst\"", 0) == 0);
  CHECK(error_of([] { parse_daemon_config("tracker = \"x\"", "d.toml"); })
            .rfind("d.toml: tracker: \"x\"", 0) == 0);
  CHECK(error_of([] { parse_daemon_config("offer_relay = \"1.2.3.4\"", "d.toml"); })
            .rfind("d.toml: offer_relay: \"1.2.3.4\"", 0) == 0);
  CHECK(error_of([] {
          auto config = parse_daemon_config("node = \"node_0\"\nrelay = \"10.0.0.1\"", "d.toml");
          validate_daemon_config(config, "d.toml");
        }).rfind("d.toml: relay: \"10.0.0.1\"", 0) == 0);
  CHECK(error_of([] {
          auto config = parse_daemon_config(
              "node = \"node_0\"\nrelay = \"10.0.0.1:9000\"\noffer_relay = \"0.0.0.0:9000\"",
              "d.toml");
          validate_daemon_config(config, "d.toml");
        }) == "d.toml: offer_relay: a daemon behind a relay (relay = \"10.0.0.1:9000\") cannot be "
              "reached to relay for others");
  CHECK(error_of([] { parse_daemon_config("shared_memory = \"no\"", "d.toml"); }) ==
        "d.toml: shared_memory: must be true or false, got a string");
  CHECK(error_of([] { parse_daemon_config("device = \"gpu\"", "d.toml"); }) ==
        "d.toml: device: \"gpu\" is not cpu, cuda or cuda:N");
  for (const char* bad : {"cuda:", "cuda:-1", "cuda:x", "CPU", "cuda:123456", "cuda:0 "}) {
    CHECK(error_of([&] {
            parse_daemon_config(std::string("device = \"") + bad + "\"", "d.toml");
          }).find("d.toml: device: ") == 0);
  }
  CHECK(error_of([] { parse_daemon_config("device = 0", "d.toml"); }) ==
        "d.toml: device: must be a string, got an integer");
  CHECK(parse_device("cpu")->cuda == false);
  CHECK(parse_device("cuda")->index == -1);
  CHECK(parse_device("cuda:3")->index == 3);
  CHECK(error_of([] { parse_daemon_config("threads = \"4\"", "d.toml"); }) ==
        "d.toml: threads: must be an integer, got a string");
  CHECK(error_of([] { parse_daemon_config("threads = -1", "d.toml"); }) ==
        "d.toml: threads: -1 is outside [0, 1024] (0: the cores divided among the daemons on "
        "this host)");
  CHECK(error_of([] { parse_daemon_config("threads = 100000", "d.toml"); })
            .find("d.toml: threads: 100000 is outside") == 0);
  // Issue 28's probe: a line break in --node forged log lines.
  CHECK(error_of([] { parse_daemon_config("node = \"node_1\\n[info] forged\"", "d.toml"); }) ==
        "d.toml: node: \"node_1\\x0a[info] forged\" is not a node name (node_<id>: letters, "
        "digits, '_', '-' and '.', at most 64)");
  CHECK_NOTHROW(parse_daemon_config("node = \"node_12.b-c\"", "d.toml"));
  CHECK(error_of([] { parse_daemon_config("[node]\nid = 3", "d.toml"); }) ==
        "d.toml: node: must be a string, got a table");
  CHECK(error_of([] { parse_daemon_config("listen = 8080", "d.toml"); }) ==
        "d.toml: listen: must be a string, got an integer");
  CHECK(error_of([] { parse_daemon_config("log_level = \"verbose\"", "d.toml"); }) ==
        "d.toml: log_level: \"verbose\" is not one of trace, debug, info, warn, error, "
        "critical, off");
  CHECK(error_of([] { parse_daemon_config("listen = \"localhost\"", "d.toml"); }) ==
        "d.toml: listen: \"localhost\" must be host:port");
  CHECK(error_of([] { parse_daemon_config("listen = \"h:70000\"", "d.toml"); }) ==
        "d.toml: listen: \"h:70000\" has a port outside 1-65535");
  CHECK(error_of([] { parse_daemon_config("listen = \":80\"", "d.toml"); })
            .find("d.toml: listen: \":80\" has no host") == 0);
  CHECK(error_of([] { parse_daemon_config("data_dir = \"\"", "d.toml"); }) ==
        "d.toml: data_dir: must not be empty");
  const auto malformed = error_of([] { parse_daemon_config("node = \n", "d.toml"); });
  CHECK(malformed.find("d.toml: malformed TOML at line 1") == 0);
  CHECK(malformed.find('\n') == std::string::npos);
  CHECK(error_of([] { load_daemon_config("/nonexistent/ravnestd.toml"); })
            .find("/nonexistent/ravnestd.toml: cannot read") == 0);
  CHECK(error_of([] { parse_daemon_config("node = \"a\"\nnode = \"b\"", "d.toml"); })
            .find("d.toml: malformed TOML") == 0);
}

TEST_CASE("daemon config: flags override the file, then the whole is validated",
          "[config][daemon]") {
  auto file = parse_daemon_config("node = \"node_1\"\nlog_level = \"warn\"\nlisten = \"a:1\"",
                                  "d.toml");
  DaemonConfigOverrides flags;
  flags.log_level = "debug";
  flags.listen = "";  // an explicit empty flag clears the file's value
  flags.threads = 2;
  flags.device = "cuda";
  flags.no_shared_memory = true;
  auto merged = merge(file, flags);
  CHECK_FALSE(merged.shared_memory);
  CHECK(merge(file, DaemonConfigOverrides{}).shared_memory);
  CHECK(merged.threads == 2);
  CHECK(merged.device == "cuda");
  CHECK(merged.node == "node_1");
  CHECK(merged.log_level == "debug");
  CHECK(merged.listen.empty());
  CHECK(merged.data_dir == "/var/lib/ravnest");

  auto nameless = merge(parse_daemon_config("", "d.toml"), DaemonConfigOverrides{});
  CHECK(error_of([&] { validate_daemon_config(nameless, "d.toml and the command line"); }) ==
        "d.toml and the command line: node: missing (set node = \"node_<id>\" or pass --node)");
  DaemonConfigOverrides bad;
  bad.node = "node_2";
  bad.log_level = "loud";
  CHECK(error_of([&] { validate_daemon_config(merge(file, bad), "flags"); })
            .find("flags: log_level: \"loud\"") == 0);
}

TEST_CASE("daemon config: memory_limit, in the file and as --memory-limit", "[config][daemon]") {
  CHECK(parse_daemon_config("", "d.toml").memory_limit == 0);
  CHECK(parse_daemon_config("memory_limit = 629145600", "d.toml").memory_limit == 629145600);
  CHECK(parse_daemon_config("memory_limit = \"600MiB\"", "d.toml").memory_limit ==
        600LL << 20);
  CHECK(parse_daemon_config("memory_limit = \"1.4GB\"", "d.toml").memory_limit == 1400000000);
  CHECK(parse_memory_limit("2 GiB", "--memory-limit") == 2LL << 30);
  CHECK(parse_memory_limit("512", "--memory-limit") == 512);

  CHECK(error_of([] { parse_daemon_config("memory_limit = 0", "d.toml"); }) ==
        "d.toml: memory_limit: \"0\" is no budget (give a size above 0, or none: the budget is "
        "then the cgroup's limit or the machine's RAM)");
  CHECK(error_of([] { parse_daemon_config("memory_limit = -5", "d.toml"); }) ==
        "d.toml: memory_limit: \"-5\" is negative (give a size above 0, or none: the budget is "
        "then the cgroup's limit or the machine's RAM)");
  CHECK(error_of([] { parse_daemon_config("memory_limit = \"lots\"", "d.toml"); }) ==
        "d.toml: memory_limit: \"lots\" is not a size (a number of bytes, or a number and a "
        "unit: B, kB, MB, GB, TB for powers of 1000, KiB, MiB, GiB, TiB for powers of 1024, "
        "e.g. \"600MiB\")");
  CHECK(error_of([] { parse_daemon_config("memory_limit = true", "d.toml"); }) ==
        "d.toml: memory_limit: must be a number of bytes or a string such as \"600MiB\", got a "
        "boolean");
  CHECK(error_of([] { parse_memory_limit("1400M", "--memory-limit"); }) ==
        "--memory-limit: \"1400M\" has a unit that says neither power: write MB for powers of "
        "1000 or MiB for powers of 1024");
  CHECK(error_of([] { parse_memory_limit("9300000000GB", "--memory-limit"); }) ==
        "--memory-limit: \"9300000000GB\" is more than 9223372036854775807 bytes");
  CHECK(error_of([] { parse_memory_limit("99999999999999999999999", "--memory-limit"); })
            .find("is more than 9223372036854775807 bytes") != std::string::npos);
  CHECK(error_of([] { parse_memory_limit("0MiB", "--memory-limit"); })
            .find("--memory-limit: \"0MiB\" is no budget") == 0);
  CHECK(error_of([] { parse_memory_limit("", "--memory-limit"); })
            .find("--memory-limit: \"\" is not a size") == 0);
  for (const char* bad : {"1.5", "MiB", "1..5GB", "1e9", "600 MiB extra", "0x100", "1,5GB"}) {
    INFO(bad);
    CHECK(error_of([&] { parse_memory_limit(bad, "--memory-limit"); })
              .find("--memory-limit: \"") == 0);
  }
  // Each line is one line.
  CHECK(error_of([] { parse_memory_limit("6\n00", "--memory-limit"); }).find('\n') ==
        std::string::npos);

  DaemonConfigOverrides flags;
  flags.memory_limit = 1000;
  CHECK(merge(parse_daemon_config("memory_limit = 5000", "d.toml"), flags).memory_limit == 1000);
  CHECK(merge(parse_daemon_config("memory_limit = 5000", "d.toml"), {}).memory_limit == 5000);
}

TEST_CASE("daemon config: a node's own TLS certificate and key go together", "[config][daemon]") {
  const auto both = parse_daemon_config("tls_cert = \"/etc/ravnest/tls.crt\"\n"
                                        "tls_key = \"/etc/ravnest/tls.key\"", "d.toml");
  CHECK(both.tls_cert == "/etc/ravnest/tls.crt");
  CHECK(both.tls_key == "/etc/ravnest/tls.key");
  CHECK(error_of([] { parse_daemon_config("tls_cert = \"a.crt\"", "d.toml"); }) ==
        "d.toml: tls_key: missing (tls_cert and tls_key go together)");
  CHECK(error_of([] { parse_daemon_config("tls_key = \"a.key\"", "d.toml"); }) ==
        "d.toml: tls_cert: missing (tls_cert and tls_key go together)");
  DaemonConfigOverrides flags;
  flags.node = "node_1";
  flags.tls_cert = "b.crt";
  flags.tls_key = "b.key";
  const auto merged = merge(both, flags);
  CHECK(merged.tls_cert == "b.crt");
  CHECK(merged.tls_key == "b.key");
  validate_daemon_config(merged, "flags");
  flags.insecure = true;
  CHECK(error_of([&] { validate_daemon_config(merge(both, flags), "flags"); }) ==
        "flags: tls_cert: a certificate with --insecure (no TLS) would be ignored");
}

TEST_CASE("secret file: read, trimmed, permissions reported", "[config][secret]") {
  ScratchDir dir;
  bool open = true;
  CHECK(base::read_secret(write(dir.path / "s1", "hunter2\n").string(), &open) == "hunter2");
  CHECK_FALSE(open);
  CHECK(read_secret(write(dir.path / "s2", "abc def\r\n\n").string()) == "abc def");
  CHECK(read_secret(write(dir.path / "s3", "no newline", 0644).string(), &open) == "no newline");
  CHECK(open);
  CHECK(read_secret(write(dir.path / "s4", "x", 0640).string(), &open) == "x");
  CHECK(open);

  const auto empty = write(dir.path / "empty", "\n").string();
  CHECK(error_of([&] { read_secret(empty); }) == empty + ": secret file is empty");
  const auto missing = (dir.path / "missing").string();
  CHECK(error_of([&] { read_secret(missing); }) ==
        missing + ": secret file cannot be read: No such file or directory");
  CHECK(error_of([&] { read_secret(dir.path.string()); }) ==
        dir.path.string() + ": secret file is not a regular file");
  const auto big = write(dir.path / "big", std::string(70000, 'a')).string();
  CHECK(error_of([&] { read_secret(big); }).find("larger than 64 KiB") != std::string::npos);
}

TEST_CASE("secrets compare equal only when equal", "[config][secret]") {
  CHECK(base::secrets_equal("", ""));
  CHECK(secrets_equal("hunter2", "hunter2"));
  CHECK_FALSE(secrets_equal("hunter2", "hunter3"));
  CHECK_FALSE(secrets_equal("hunter2", "Hunter2"));
  CHECK_FALSE(secrets_equal("hunter2", "hunter"));
  CHECK_FALSE(secrets_equal("hunter", "hunter2"));
  CHECK_FALSE(secrets_equal("", "a"));
  CHECK_FALSE(secrets_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
  CHECK(secrets_equal(std::string("a\0b", 3), std::string("a\0b", 3)));
  CHECK_FALSE(secrets_equal(std::string("a\0", 2), "a"));  // padding with zeros is not equality
}

TEST_CASE("child_path accepts plain file names only", "[config][path]") {
  const fs::path dir = "/var/lib/ravnest";
  CHECK(base::child_path(dir, "model.pt") == fs::path("/var/lib/ravnest/model.pt"));
  CHECK(child_path(dir, "node_3-step_100.ckpt") == dir / "node_3-step_100.ckpt");
  CHECK(child_path(dir, "a..b") == dir / "a..b");
  CHECK(child_path(dir, std::string(200, 'x')) == dir / std::string(200, 'x'));

  // Issue 28: a user's data file is "my data.csv" or "données.csv"; both ship.
  for (const char* name : {"my data.csv", "caf\xc3\xa9.csv", "\xe3\x83\x87\xe3\x83\xbc\xe3\x82\xbf.csv",
                           "a:b", "~root", "$HOME", "data (1).csv", "\xf0\x9f\x93\x88.csv"}) {
    INFO("name: " << name);
    CHECK(child_path(dir, name) == dir / name);
    CHECK(base::is_plain_file_name(name));
  }
  const char* refused[] = {"",          ".",          "..",          "../etc/passwd", "/etc/passwd",
                           "a/b",       ".hidden",    "a\\b",        "name\nnext",    "tab\tname",
                           "del\x7f",   "\xff.csv",   "trunc\xc3",    "\xc0\xaf",       "c1\xc2\x85",
                           "\xed\xa0\x80", "\xf4\x90\x80\x80"};
  for (const char* name : refused) {
    INFO("name: " << name);
    CHECK_THROWS_AS(child_path(dir, name), ConfigError);
    CHECK_FALSE(base::is_plain_file_name(name));
  }
  CHECK_THROWS_AS(child_path(dir, std::string(201, 'x')), ConfigError);
  CHECK_THROWS_AS(child_path(dir, std::string("a\0b", 3)), ConfigError);

  CHECK(error_of([&] { child_path(dir, "../etc/passwd"); }) ==
        "file name \"../etc/passwd\" starts with a dot");
  CHECK(error_of([&] { child_path(dir, "x/../../etc"); }) ==
        "file name \"x/../../etc\" contains '/': a file name, not a path, is expected");
  CHECK(error_of([&] { child_path(dir, "bad\nname"); }) ==
        "file name \"bad\\x0aname\" may only contain printable characters in UTF-8 (no control "
        "characters, no '\\')");
  CHECK(error_of([&] { child_path(dir, ""); }) == "file name \"\" is empty");
}

TEST_CASE("child_relative_path accepts plain names joined by '/' only", "[config][path]") {
  const fs::path dir = "/var/lib/ravnest/datasets";
  CHECK(base::child_relative_path(dir, "d.csv") == dir / "d.csv");
  CHECK(child_relative_path(dir, "ab12/MNIST/raw/train-images-idx3-ubyte") ==
        dir / "ab12" / "MNIST" / "raw" / "train-images-idx3-ubyte");
  for (const char* path : {"", "/etc/passwd", "a//b", "a/", "a/../../etc", "../a", "a/.hidden",
                           "a/./b", "a\\b"}) {
    INFO("path: " << path);
    CHECK_THROWS_AS(child_relative_path(dir, path), ConfigError);
  }
  CHECK(error_of([&] { child_relative_path(dir, "ab/../../etc"); }) ==
        "path \"ab/../../etc\": component \"..\" starts with a dot");
}

TEST_CASE("create_directories_within: real directories only, nothing made through a symlink",
          "[config][path]") {
  ScratchDir scratch;
  const fs::path data = scratch.path / "data";
  fs::create_directories(data);
  base::create_directories_within(data, data / "checkpoints" / "abc" / "kept");
  CHECK(fs::is_directory(data / "checkpoints" / "abc" / "kept"));
  create_directories_within(data, data / "checkpoints");  // there already: fine
  CHECK_THROWS_AS(create_directories_within(data, data), ConfigError);  // nothing under it

  // Issue 28: a symlinked checkpoints/ or datasets/ was written through.
  const fs::path elsewhere = scratch.path / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, data / "datasets");
  try {
    create_directories_within(data, data / "datasets" / "bundle");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == (data / "datasets").string() +
                                       " is a symlink; ravnestd writes only inside its data "
                                       "directory: make it a directory of its own");
  }
  CHECK(fs::is_empty(elsewhere));  // nothing created through it
  fs::create_directory_symlink(elsewhere, data / "checkpoints" / "abc" / "link");
  CHECK_THROWS_AS(create_directories_within(data, data / "checkpoints" / "abc" / "link" / "x"),
                  ConfigError);
  write(data / "file", "x");
  CHECK_THROWS_AS(create_directories_within(data, data / "file" / "x"), ConfigError);
  CHECK_THROWS_AS(create_directories_within(data, scratch.path / "outside"), ConfigError);
  // What is above the base may be a symlink (/var/lib/ravnest -> /data/ravnest).
  fs::create_directory_symlink(data, scratch.path / "alias");
  CHECK_NOTHROW(create_directories_within(scratch.path / "alias", scratch.path / "alias" / "more"));
}

TEST_CASE("sd_notify: a no-op without NOTIFY_SOCKET", "[config][systemd]") {
  const char* saved = std::getenv("NOTIFY_SOCKET");
  std::string saved_value = saved ? saved : "";
  ::unsetenv("NOTIFY_SOCKET");
  CHECK_FALSE(notify_state("READY=1"));
  notify_ready();
  notify_status("starting");
  notify_stopping();
  if (saved) ::setenv("NOTIFY_SOCKET", saved_value.c_str(), 1);
}

TEST_CASE("sd_notify: READY=1, STATUS and STOPPING reach the socket", "[config][systemd]") {
  ScratchDir dir;
  const std::string path = (dir.path / "notify.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof address.sun_path);
  std::copy(path.begin(), path.end(), address.sun_path);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  auto receive = [&] {
    char buffer[512];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    return n < 0 ? std::string("(nothing)") : std::string(buffer, static_cast<size_t>(n));
  };

  const char* saved = std::getenv("NOTIFY_SOCKET");
  std::string saved_value = saved ? saved : "";
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  notify_ready();
  CHECK(receive() == "READY=1");
  notify_status("training step 3\nof 10");
  CHECK(receive() == "STATUS=training step 3 of 10");
  notify_stopping();
  CHECK(receive() == "STOPPING=1");
  CHECK(std::getenv("NOTIFY_SOCKET") != nullptr);  // left for later notifications
  if (saved) {
    ::setenv("NOTIFY_SOCKET", saved_value.c_str(), 1);
  } else {
    ::unsetenv("NOTIFY_SOCKET");
  }
  ::close(fd);
}

TEST_CASE("daemon config: [limits]", "[config][daemon][limits]") {
  const auto defaults = parse_daemon_config("node = \"node_1\"", "d.toml").limits;
  CHECK(defaults.idle_seconds == 600);
  CHECK(defaults.connections_per_peer == 64);
  CHECK(defaults.push_stage_bytes == uint64_t{64} << 20);
  const auto set = parse_daemon_config(
      "node = \"node_1\"\n[limits]\nidle_seconds = 30\nstreams_per_peer = 8\n"
      "push_stage_bytes = 2097152\n",
      "d.toml");
  CHECK(set.limits.idle_seconds == 30);
  CHECK(set.limits.streams_per_peer == 8);
  CHECK(set.limits.push_stage_bytes == 2097152);
  CHECK(set.limits.connections == defaults.connections);
  // The documented example sets every limit, to its default.
  const auto example = load_daemon_config(source_dir() + "/configs/ravnestd.toml").limits;
  for (const auto& key : kDaemonLimitKeys) {
    INFO(std::string(key.name));
    CHECK(example.*(key.field) == defaults.*(key.field));
  }
  CHECK(error_of([] { parse_daemon_config("[limits]\nidle = 3", "d.toml"); }) ==
        "d.toml: unknown key \"limits.idle\" (known keys of [limits]: push_stage_bytes, "
        "send_bytes, stream_chunk_bytes, message_bytes, file_bytes, transfer_bytes, connections, "
        "connections_per_peer, streams_per_peer, handshake_seconds, authenticate_seconds, "
        "message_seconds, min_bytes_per_second, idle_seconds)");
  CHECK(error_of([] { parse_daemon_config("[limits]\nidle_seconds = 0", "d.toml"); }) ==
        "d.toml: limits.idle_seconds: must be an integer from 10 to 604800, got 0");
  CHECK(error_of([] { parse_daemon_config("[limits]\nconnections = -1", "d.toml"); }) ==
        "d.toml: limits.connections: must be an integer from 4 to 1048576, got -1");
  CHECK(error_of([] { parse_daemon_config("[limits]\nsend_bytes = \"64M\"", "d.toml"); }) ==
        "d.toml: limits.send_bytes: must be an integer from 4194304 to 4294967296, got a string");
  CHECK(error_of([] { parse_daemon_config("limits = 3", "d.toml"); }) ==
        "d.toml: limits: must be a table ([limits])");
  CHECK(error_of([] {
          parse_daemon_config("[limits]\nhandshake_seconds = 9999999999999", "d.toml");
        }) == "d.toml: limits.handshake_seconds: must be an integer from 1 to 604800, got "
              "9999999999999");
}
