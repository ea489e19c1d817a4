// `ravnest dashboard` in a real browser: 3 daemons, the page loaded by headless Chromium before a
// job, while one runs and after it; the DOM's node count, states, the last loss against the
// leaf's losses.txt and the job; a screenshot kept as a test artifact
// (<build>/test_artifacts/dashboard.png); and the server's answers to bad requests.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>
#include <vector>

#include "libs/local/local_daemons.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// One request on a fresh connection; the whole answer.
std::string http(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char chunk[4096];
    for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) answer.append(chunk, n);
  }
  ::close(fd);
  return answer;
}

struct Dashboard {
  int pid = 0;
  ~Dashboard() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ::kill(pid, SIGKILL);
    }
  }
};

test::CommandResult chromium(const fs::path& profile, const std::string& what, int port) {
  return test::run_command("chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                           "--no-first-run --user-data-dir=" + profile.string() +
                               " --virtual-time-budget=4000 " + what + " http://127.0.0.1:" +
                               std::to_string(port) + "/ 2>/dev/null",
                           120);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the dashboard shows the plan, live progress, the curves and the job in a browser",
          "[cli][dashboard]") {
  {
    INFO("chromium is missing: scripts/bootstrap installs it");
    REQUIRE(test::run_command("command -v chromium").exit_code == 0);
  }
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const fs::path dir = cluster.dir();
  const int port = local::free_loopback_port();
  Dashboard dashboard;
  auto started = test::run_command(
      "cd " + dir.string() + " && setsid " + test::binary_dir() + "/apps/ravnest/ravnest dashboard --plan " +
      cluster.plan_dir() + " --secret-file " + cluster.secret_file() + " --listen 127.0.0.1:" +
      std::to_string(port) + " > " + (dir / "dashboard.log").string() + " 2>&1 < /dev/null & echo $!");
  REQUIRE(started.exit_code == 0);
  dashboard.pid = std::stoi(started.out);
  for (int i = 0; i < 100 && http(port, "GET / HTTP/1.0\r\n\r\n").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(test::read_text(dir / "dashboard.log"));
  const std::string at = std::to_string(port);
  const auto page = http(port, "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + at + "\r\n\r\n");
  REQUIRE(page.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(page.find("<title>ravnest dashboard</title>") != std::string::npos);
  CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));  // no CDN, nothing fetched elsewhere

  // Without a job: the plan, every node idle, no curve.
  const fs::path profile = dir / "chromium";
  auto before = chromium(profile, "--dump-dom", port);
  INFO(before.out << before.err);
  REQUIRE(before.exit_code == 0);
  CHECK(before.out.find("data-loaded=\"1\"") != std::string::npos);
  CHECK(before.out.find("data-node-count=\"3\"") != std::string::npos);
  CHECK(count(before.out, "data-state=\"idle\">") == 3);
  CHECK(before.out.find("no losses yet") != std::string::npos);

  // While a job runs: it is shown live.
  test::write_text(dir / "job.toml",
                   "[train]\nepochs = 6\nbatch_size = 32\nmicro_batches = 4\nseed = 1\n\n[data]\n"
                   "format = \"csv\"\ntrain = \"" + (test::digits_dir() / "digits_train.csv").string() +
                       "\"\nvalidation = \"" + (test::digits_dir() / "digits_val.csv").string() +
                       "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
                       "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n"
                       "name = \"adam\"\nlr = 0.003\n");
  auto detached = cluster.ravnest("train", (dir / "job.toml").string() + " --detach");
  INFO(detached.out << detached.err);
  REQUIRE(detached.exit_code == 0);
  REQUIRE(cluster.wait_for_batches(0, 3, 60));
  auto during = chromium(profile, "--dump-dom", port);
  const bool still_training = !cluster.wait_for_batches(0, 270, 0);
  INFO(during.out);
  if (still_training) CHECK(during.out.find("data-state=\"training\">") != std::string::npos);
  CHECK(during.out.find("class=\"curve\" data-cluster=\"0\"") != std::string::npos);
  auto attached = cluster.ravnest("train", "--attach", 600);
  INFO(attached.out << attached.err);
  REQUIRE(attached.exit_code == 0);

  // Afterwards: every node finished, the leaf's last loss as losses.txt has it, the rounds, the job.
  auto after = chromium(profile, "--dump-dom", port);
  INFO(after.out);
  REQUIRE(after.exit_code == 0);
  CHECK(count(after.out, "data-state=\"finished\">") == 3);
  const auto losses = test::read_text(cluster.data_dir(2) / "losses.txt");
  const auto last_line = losses.substr(losses.rfind('\n', losses.size() - 2) + 1);
  char expected[80];
  std::snprintf(expected, sizeof expected, "class=\"last-loss\" data-cluster=\"0\">%.4f</td>",
                std::stod(last_line));
  CHECK(after.out.find(expected) != std::string::npos);
  CHECK(count(after.out, "class=\"validation\" data-cluster=\"0\"") == 6);  // one round per epoch
  CHECK(after.out.find("name = \"adam\"") != std::string::npos);            // the job's recipe
  std::smatch accuracy;
  CHECK(std::regex_search(after.out, accuracy,
                          std::regex("class=\"accuracy\" data-cluster=\"0\">0\\.9[0-9]{3}<")));

  // The screenshot, a test artifact (and the README's picture).
  const fs::path artifacts = fs::path(test::binary_dir()) / "test_artifacts";
  fs::create_directories(artifacts);
  const fs::path shot = artifacts / "dashboard.png";
  fs::remove(shot);
  auto screenshot = chromium(profile, "--window-size=1280,860 --hide-scrollbars --screenshot=" + shot.string(), port);
  INFO(screenshot.out << screenshot.err);
  REQUIRE(fs::exists(shot));
  CHECK(test::read_text(shot).substr(1, 3) == "PNG");
  CHECK(fs::file_size(shot) > 20000);

  // Bad requests get an answer and nothing more; the server goes on.
  CHECK(http(port, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(http(port, "POST /api/state HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(http(port, "hello\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(http(port, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  // Issue 43: a web page elsewhere whose name is rebound to 127.0.0.1 (DNS rebinding) sends its
  // own name as Host: refused, the state never read; the listen address and localhost answer.
  for (const std::string& host : std::vector<std::string>{"evil.example:" + at, "evil.example",
                                                         "127.0.0.1.evil.example",
                                                         "localhost.evil.example:" + at,
                                                         "10.0.0.1:" + at, ""}) {
    INFO("Host: " << host);
    const auto refused = http(port, "GET /api/state HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    CHECK(refused.rfind("HTTP/1.1 403 ", 0) == 0);
    CHECK(refused.find("node_count") == std::string::npos);
  }
  for (const std::string& host :
       std::vector<std::string>{"localhost:" + at, "LOCALHOST", "127.0.0.1:" + at, "127.0.0.1"}) {
    INFO("Host: " << host);
    CHECK(http(port, "GET /api/state HTTP/1.1\r\nhost: " + host + "\r\n\r\n")
              .rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  }
  const auto state = http(port, "GET /api/state HTTP/1.1\r\n\r\n");
  CHECK(state.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(state.find("\"node_count\":3") != std::string::npos);

  // Issue 28: connections that send nothing delay no page (they delayed each by 5 s).
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(idle.back(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  }
  const auto asked = std::chrono::steady_clock::now();
  CHECK(http(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  CHECK(seconds < 1.0);
  for (int fd : idle) ::close(fd);
}
