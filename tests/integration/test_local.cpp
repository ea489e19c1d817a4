// `ravnest local` (apps/ravnest/commands/local.cpp): its pure decisions, then the command end to
// end (daemons that answer `ravnest status` with the secret found without a flag, stopped by
// SIGINT), then the Python package (python/ravnest) running a Ravnest user's script on it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "apps/ravnest/local_pool.h"
#include "libs/config/pool/node_pool.h"
#include "tests/support/test_env.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace ravnest;

namespace {

std::string ravnest_binary() { return test::binary_dir() + "/apps/ravnest/ravnest"; }

bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// `ravnest local ARGS` in the background, its stdout and stderr in files of `dir`.
struct LocalRun {
  pid_t pid = -1;
  fs::path out, err;
  LocalRun(const fs::path& dir, std::vector<std::string> args) : out(dir / "local.out"), err(dir / "local.err") {
    args.insert(args.begin(), {ravnest_binary(), "local"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~LocalRun() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // Waits for its one line; false when it exited or took longer than `seconds`.
  bool wait_ready(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (test::read_text(out).find("Ctrl-C stops them") != std::string::npos) return true;
      if (::waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Its exit code, -1 when it runs after `seconds`.
  int wait_exit(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
};

// scripts/venv's Python (PyTorch 2.x), where the package's 2.x checks run; it may be absent.
std::string venv_python() {
  return std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
         "/.cache/ravnest/venv-torch2/bin/python";
}

// The Pythons a package script runs under: Debian's (PyTorch 1.13), and the venv's where it is.
std::vector<std::string> package_pythons() {
  std::vector<std::string> pythons = {test::python()};
  if (fs::exists(venv_python())) pythons.push_back(venv_python());
  return pythons;
}
}  // namespace

TEST_CASE("local: pool: the file, refusal, gpus, secret text", "[local]") {
  const std::string pool = cli::local_pool_json({4001, 4002}, 8, 1000);
  const auto nodes = config::parse_node_pool(pool, "pool", false);
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[1].name == "node_1");
  CHECK(nodes[1].address == "127.0.0.1:4002");
  CHECK(nodes[0].ram_gb == 8);
  CHECK(nodes[0].bandwidth_mbps == 1000);
  CHECK(config::parse_node_pool(cli::local_pool_json({1}, 0.0001, 2.5), "p", false)[0].ram_gb ==
        0.0001);

  CHECK(cli::may_write_pool(std::nullopt, std::nullopt, false));
  CHECK(cli::may_write_pool(std::string("a"), std::string("a"), false));
  CHECK_FALSE(cli::may_write_pool(std::string("a"), std::nullopt, false));
  CHECK_FALSE(cli::may_write_pool(std::string("a"), std::string("b"), false));
  CHECK(cli::may_write_pool(std::string("a"), std::nullopt, true));

  CHECK(cli::parse_gpu_list("") == std::vector<int>{});
  CHECK(cli::parse_gpu_list("0,1,3") == std::vector<int>{0, 1, 3});
  CHECK_THROWS_WITH(cli::parse_gpu_list("0,,1"), Catch::Contains("--gpus"));
  CHECK_THROWS_WITH(cli::parse_gpu_list("-1"), Catch::Contains("--gpus"));
  CHECK(cli::device_for_node(0, {}).empty());
  CHECK(cli::device_for_node(3, {0, 1}) == "cuda:1");

  // RFC 4648's test vectors.
  CHECK(cli::base64("") == "");
  CHECK(cli::base64("f") == "Zg==");
  CHECK(cli::base64("fo") == "Zm8=");
  CHECK(cli::base64("foo") == "Zm9v");
  CHECK(cli::base64("foobar") == "Zm9vYmFy");
}

TEST_CASE("local: daemons: two, status with the secret found, stopped by SIGINT", "[local]") {
  test::TempDir dir;
  LocalRun local(dir.path(), {"--nodes", "2", "--dir", dir.path().string()});
  REQUIRE(local.wait_ready(60));
  INFO(test::read_text(local.out) << test::read_text(local.err));
  const fs::path node_data = dir / "node_data";
  const auto pool = config::load_node_pool((node_data / "node_configs.json").string());
  REQUIRE(pool.size() == 2);
  struct stat info {};
  REQUIRE(::stat((node_data / "secret").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  CHECK(test::read_text(node_data / "secret").size() == 45);  // 32 bytes in base64, a newline
  CHECK(fs::exists(node_data / "local/node_1/ravnestd.log"));
  for (const auto& node : pool) CHECK(accepts(node.port));

  // Neither --secret-file nor $RAVNEST_SECRET_FILE: node_data/secret, from the working directory.
  const std::string in_dir = "cd " + dir.path().string() + " && env -u RAVNEST_SECRET_FILE ";
  auto clusterize = test::run_command(
      in_dir + ravnest_binary() + " clusterize " + test::digits_model() +
          " --nodes node_data/node_configs.json --out node_data --no-memory-probe "
          "--example-input 8x1x8x8:float32 --push",
      300);
  INFO(clusterize.out << clusterize.err);
  REQUIRE(clusterize.exit_code == 0);
  auto status = test::run_command(in_dir + ravnest_binary() + " status", 60);
  INFO(status.out << status.err);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find("node_0") != std::string::npos);
  CHECK(status.out.find("unreachable") == std::string::npos);

  // A second `ravnest local` there may replace its own pool file, never a user's.
  test::TempDir other;
  fs::create_directories(other / "node_data");
  test::write_text(other / "node_data/node_configs.json", "{}\n");
  auto refused = test::run_command(ravnest_binary() + " local --nodes 1 --dir " +
                                   other.path().string(), 30);
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.rfind("ravnest: error: ", 0) == 0);
  CHECK(refused.err.find("node_configs.json") != std::string::npos);
  CHECK(test::read_text(other / "node_data/node_configs.json") == "{}\n");
  CHECK_FALSE(fs::exists(other / "node_data/secret"));

  // Issue 43 (low): --nodes 100000 started daemons one after another until the machine gave
  // out. Refused in one line, nothing written (a SIGINT after 20 s ends it otherwise).
  test::TempDir many;
  auto too_many = test::run_command("timeout -s INT 20 " + ravnest_binary() + " local --nodes " +
                                    "100000 --dir " + many.path().string(), 60);
  INFO(too_many.out << too_many.err);
  CHECK(too_many.exit_code == 1);
  CHECK(too_many.err.find("--nodes: at most 256") != std::string::npos);
  CHECK_FALSE(fs::exists(many / "node_data/secret"));

  // Issue 43: a second `ravnest local` in the same directory wrote a fresh secret before it
  // failed on the running daemons' data directories, and every command there was "wrong
  // secret". It is refused first, in one line, and writes nothing.
  const std::string secret_before = test::read_text(node_data / "secret");
  const std::string pool_before = test::read_text(node_data / "node_configs.json");
  auto second = test::run_command(ravnest_binary() + " local --nodes 2 --dir " +
                                  dir.path().string(), 60);
  INFO(second.out << second.err);
  CHECK(second.exit_code != 0);
  CHECK(second.err.rfind("ravnest: error: ", 0) == 0);
  CHECK(second.err.find("runs in") != std::string::npos);
  CHECK(std::count(second.err.begin(), second.err.end(), '\n') == 1);
  CHECK(test::read_text(node_data / "secret") == secret_before);
  CHECK(test::read_text(node_data / "node_configs.json") == pool_before);
  auto still = test::run_command(in_dir + ravnest_binary() + " status", 60);
  INFO(still.out << still.err);
  CHECK(still.exit_code == 0);
  CHECK(still.out.find("unreachable") == std::string::npos);

  ::kill(local.pid, SIGINT);
  CHECK(local.wait_exit(30) == 0);
  for (const auto& node : pool) CHECK_FALSE(accepts(node.port));
  CHECK(config::load_node_pool((node_data / "node_configs.json").string()).size() == 2);

  // Again there (its own pool file is replaced), and its daemon killed: reported with its log,
  // exit 1.
  LocalRun again(dir.path(), {"--nodes", "1", "--dir", dir.path().string()});
  REQUIRE(again.wait_ready(60));
  CHECK(config::load_node_pool((node_data / "node_configs.json").string()).size() == 1);
  const std::string children = test::read_text("/proc/" + std::to_string(again.pid) + "/task/" +
                                               std::to_string(again.pid) + "/children");
  const pid_t daemon = static_cast<pid_t>(std::atoi(children.c_str()));
  REQUIRE(daemon > 0);
  ::kill(daemon, SIGKILL);
  CHECK(again.wait_exit(30) == 1);
  const std::string err = test::read_text(again.err);
  CHECK(err.rfind("ravnest: error: ravnestd node_0 exited", 0) == 0);

  // Issue 43 (low): `ravnest local` killed with kill -9 left its daemons running. They get
  // SIGTERM when it dies (PR_SET_PDEATHSIG) and stop.
  LocalRun killed(dir.path(), {"--nodes", "1", "--dir", dir.path().string()});
  REQUIRE(killed.wait_ready(60));
  const pid_t orphan = static_cast<pid_t>(std::atoi(
      test::read_text("/proc/" + std::to_string(killed.pid) + "/task/" +
                      std::to_string(killed.pid) + "/children")
          .c_str()));
  REQUIRE(orphan > 0);
  ::kill(killed.pid, SIGKILL);
  ::waitpid(killed.pid, nullptr, 0);
  killed.pid = -1;
  // Alive: it exists and is no zombie (one that init has not reaped yet is gone).
  auto alive = [](pid_t pid) {
    if (::kill(pid, 0) != 0) return false;
    const std::string stat = test::read_text("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
  };
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (alive(orphan) && std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const bool gone = !alive(orphan);
  if (!gone) ::kill(orphan, SIGKILL);  // not left behind by the test either
  CHECK(gone);

  // Issue 43 (13): a Python script killed (SIGTERM) inside `with ravnest.local(...)` left
  // `ravnest local` and its daemons running. The package starts it to get SIGTERM when the
  // script dies, and it stops its daemons.
  test::write_text(dir / "held.py", "import sys, time\nimport ravnest\n"
                                    "with ravnest.local(nodes=1, dir=sys.argv[1]):\n"
                                    "    sys.stdout.flush()\n    time.sleep(600)\n");
  auto python = test::run_command(
      "cd " + dir.path().string() + " && PYTHONPATH=" + test::source_dir() + "/python setsid " +
      test::python() + " held.py " + dir.path().string() + " > held.out 2>&1 < /dev/null & echo $!");
  REQUIRE(python.exit_code == 0);
  const pid_t script = static_cast<pid_t>(std::atoi(python.out.c_str()));
  REQUIRE(script > 0);
  auto child_of = [](pid_t pid) {
    return static_cast<pid_t>(std::atoi(
        test::read_text("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) +
                        "/children").c_str()));
  };
  const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (test::read_text(dir / "held.out").find("Ctrl-C stops them") == std::string::npos &&
         std::chrono::steady_clock::now() < ready_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(test::read_text(dir / "held.out"));
  const pid_t local_pid = child_of(script);
  REQUIRE(local_pid > 0);
  const pid_t its_daemon = child_of(local_pid);
  REQUIRE(its_daemon > 0);
  ::kill(script, SIGTERM);
  const auto stopped_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((alive(local_pid) || alive(its_daemon)) && std::chrono::steady_clock::now() < stopped_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const bool local_gone = !alive(local_pid), daemon_gone = !alive(its_daemon);
  for (pid_t left : {script, local_pid, its_daemon}) {
    if (alive(left)) ::kill(left, SIGKILL);  // not left behind by the test either
  }
  CHECK(local_gone);
  CHECK(daemon_gone);
}

// The package's pure parts (tests/python/package_recipe.py), then a Ravnest user's script
// (tests/python/package_user.py) through python/ravnest: with Debian's PyTorch, and with
// PyTorch 2.x where its venv exists.
TEST_CASE("local: python: the package trains a user's script", "[local][python]") {
  const std::string script = test::source_dir() + "/tests/python/package_user.py";
  const std::string csv = (test::digits_dir() / "digits_train.csv").string();
  const std::string venv = venv_python();
  // In the 2.x build the venv's PyTorch with its binary takes the torch.export path.
  std::vector<std::string> pythons = {test::python()};
  if (fs::exists(venv) && venv != test::python()) pythons.push_back(venv);
  else if (!fs::exists(venv)) WARN("no PyTorch 2.x venv at " << venv << ": the package is checked with Debian's only");
  for (const auto& python : pythons) {
    auto recipe = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + python +
                                        " " + test::source_dir() + "/tests/python/package_recipe.py",
                                    120);
    INFO(python << "\n" << recipe.out << recipe.err);
    CHECK(recipe.exit_code == 0);
    test::TempDir work;
    auto run = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + python + " " +
                                     script + " " + csv + " " + (work / "user").string(),
                                 400);
    INFO(python << "\n" << run.out << run.err);
    CHECK(run.exit_code == 0);
    CHECK(run.out.find("package_user: torch") != std::string::npos);
    std::printf("%s\n", run.out.substr(run.out.find("package_user:")).c_str());
  }
}

// A model the package must trace evaluates in eval mode everywhere and validation leaves its
// weights alone (tests/python/package_traced.py; libs/torch_support/traced_mode.h).
TEST_CASE("local: traced: a traced model's evaluations are eval mode's", "[local][python]") {
  const std::string script = test::source_dir() + "/tests/python/package_traced.py";
  const std::string csv = (test::digits_dir() / "digits_train.csv").string();
  const std::vector<std::string> pythons = package_pythons();
  for (const auto& python : pythons) {
    test::TempDir work;
    auto run = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + python + " " +
                                     script + " " + csv + " " + (work / "traced").string(),
                                 400);
    INFO(python << "\n" << run.out << run.err);
    CHECK(run.exit_code == 0);
    CHECK(run.out.find("package_traced: validation moved") != std::string::npos);
    std::printf("%s\n", run.out.substr(run.out.find("package_traced:")).c_str());
  }
}

// Issue 43 item 11: a traced 3-stage MLP (BatchNorm1d, Dropout, lambda activations) whose middle
// stage never finished its job at 16977ae. Not reproduced since: the model and data
// trained twice with and twice without a validation loader (tests/python/package_traced_end.py),
// each job bounded by the command's timeout, every daemon's log saying each job finished.
TEST_CASE("local: ends: a traced model's job ends on every stage", "[local][python]") {
  const std::string script = test::source_dir() + "/tests/python/package_traced_end.py";
  const std::vector<std::string> pythons = package_pythons();
  for (const auto& python : pythons) {
    test::TempDir work;
    auto run = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + python + " " +
                                     script + " " + (work / "ends").string() + " 2",
                                 240);
    INFO(python << "\n" << run.out << run.err);
    CHECK(run.exit_code == 0);
    CHECK(run.out.find("every stage finished each: yes") != std::string::npos);
  }
}

// A weight tied across the first and the last stage: verify and the training exact
// (tests/python/package_tied.py; libs/graph/stage_chain.h).
TEST_CASE("local: tied: a weight tied across stages verifies and trains exactly",
          "[local][python]") {
  const std::vector<std::string> pythons = package_pythons();
  for (const auto& python : pythons) {
    test::TempDir work;
    auto run = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + python + " " +
                                     test::source_dir() + "/tests/python/package_tied.py " +
                                     (work / "tied").string(),
                                 300);
    INFO(python << "\n" << run.out << run.err);
    CHECK(run.exit_code == 0);
    CHECK(run.out.find("package_tied: torch") != std::string::npos);
  }
}

// Ravnest's BERT example (provider.py's shape, its bert_trainer.py unchanged) on three daemons
// in three stages: every batch's loss and the fused weights against one process
// (tests/python/package_bert.py). transformers needs PyTorch 2.x: the venv's, with the 2.x
// build's binary (CMake registers it there only).
namespace {
void run_bert_example(const std::string& variant, const std::string& expect) {
  const std::string venv = venv_python();
  if (!fs::exists(venv)) {
    WARN("no PyTorch 2.x venv at " << venv << ": Ravnest's BERT example is not run");
    return;
  }
  test::TempDir work;
  auto run = test::run_command("PYTHONPATH=" + test::source_dir() + "/python " + venv + " " +
                                   test::source_dir() + "/tests/python/package_bert.py " +
                                   (work / "bert").string() + " " + variant,
                               400);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find(expect) != std::string::npos);
  const auto said = run.out.find("package_bert:");
  if (said != std::string::npos) std::printf("%s\n", run.out.substr(said).c_str());
}
}  // namespace

TEST_CASE("local: bert: Ravnest's BERT example equals one process", "[local][python]") {
  run_bert_example("adam", "package_bert: torch");
}

// The same with Ravnest's own optimizer, torch_optimizer.Lamb ([optimizer] lamb).
TEST_CASE("local: lamb: Ravnest's BERT example with Lamb equals one process",
          "[local][python]") {
  run_bert_example("lamb", "package_bert: torch");
}
