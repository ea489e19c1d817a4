#include "libs/local/namespace_hosts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

namespace ravnest::local {

namespace fs = std::filesystem;

namespace {

// scripts/wan: $RAVNEST_WAN_SCRIPT, else the source tree's this binary was built from.
std::string wan_script() {
  if (const char* path = std::getenv("RAVNEST_WAN_SCRIPT"); path && *path) return path;
  return std::string(RAVNEST_SOURCE_DIR) + "/scripts/wan";
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` through the shell; its exit code, and its output (stdout and stderr) in `output`.
int run_command(const std::string& command, std::string& output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string hosts_unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (this process is not)";
  std::string ignored;
  if (run_command("ip -V", ignored) != 0) return "no `ip` (iproute2) on PATH";
  if (!fs::exists(wan_script())) return "no scripts/wan at " + wan_script();
  return "";
}

std::string unique_hosts_name(const std::string& prefix) {
  static std::atomic<int> sets{0};
  const int k = sets++;
  return prefix + std::to_string(::getpid() % 1000) + static_cast<char>('a' + k % 26);
}

NamespaceHosts::NamespaceHosts(std::string name, int nodes, std::string rate, int behind_nat,
                               std::string slow)
    : name_(std::move(name)), rate_(rate == "none" ? "" : std::move(rate)) {
  if (const std::string why = hosts_unavailable(); !why.empty()) throw HostsUnavailable(why);
  if (name_.empty() || name_.size() > 10) {
    throw std::invalid_argument("namespace set name '" + name_ + "': 1 to 10 characters");
  }
  std::string output;
  const std::string command = "bash " + shell_quote(wan_script()) + " up " +
                              std::to_string(nodes) + " --delay 0 --name " + shell_quote(name_) +
                              " --rate " + shell_quote(rate_.empty() ? "none" : rate_) +
                              " --nat " + std::to_string(behind_nat) +
                              (slow.empty() ? std::string() : " --slow " + shell_quote(slow));
  if (run_command(command, output) != 0) {
    std::string ignored;
    run_command("bash " + shell_quote(wan_script()) + " down --name " + shell_quote(name_),
                ignored);
    throw std::runtime_error("scripts/wan up failed: " + output);
  }
  // One line per node: "I listen reach", listen = reach = ADDRESS:PORT in the bridge mode ("-"
  // for reach behind NAT), then "bridge ADDRESS".
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    if (line.rfind("bridge ", 0) == 0) {
      fields.ignore(7);
      fields >> bridge_address_;
      continue;
    }
    size_t index = 0;
    std::string listen, reach;
    if (!(fields >> index >> listen >> reach) || index != addresses_.size()) continue;
    addresses_.push_back(listen.substr(0, listen.rfind(':')));
    natted_.push_back(reach == "-");
  }
  if (addresses_.size() != static_cast<size_t>(nodes)) {
    std::string ignored;
    run_command("bash " + shell_quote(wan_script()) + " down --name " + shell_quote(name_),
                ignored);
    throw std::runtime_error("scripts/wan up printed no address for every node: " + output);
  }
}

NamespaceHosts::~NamespaceHosts() {
  std::string ignored;
  run_command("bash " + shell_quote(wan_script()) + " down --name " + shell_quote(name_), ignored);
}

void enter_namespace(const std::string& ns) {
  const std::string path = "/run/netns/" + ns;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("cannot enter " + path + ": " + std::strerror(error));
}

double measure_link_bandwidth(const NamespaceHosts& hosts, size_t from, size_t to,
                              double seconds, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, hosts.address(to).c_str(), &addr.sin_addr) != 1) {
    throw std::runtime_error("link bound: bad address " + hosts.address(to));
  }
  std::string error;
  std::atomic<bool> listening{false}, failed{false};
  uint64_t received = 0;
  double receive_seconds = 0;
  // The receiver counts from the first byte to the end of the stream: the bytes the link carried
  // over the time it carried them (no connection setup, no tail left in the sender's buffers).
  std::thread receiver([&] {
    try {
      enter_namespace(hosts.namespace_of(to));
      const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int one = 1;
      ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
          ::listen(listener, 1) != 0) {
        ::close(listener);
        throw std::runtime_error("cannot listen on " + hosts.address(to) + ":" +
                                 std::to_string(port) + ": " + std::strerror(errno));
      }
      listening = true;
      const int fd = ::accept(listener, nullptr, nullptr);
      ::close(listener);
      if (fd < 0) throw std::runtime_error("accept failed");
      std::vector<char> buffer(1 << 20);
      std::chrono::steady_clock::time_point first;
      for (;;) {
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        if (received == 0) first = std::chrono::steady_clock::now();
        received += static_cast<uint64_t>(n);
      }
      receive_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
      ::close(fd);
    } catch (const std::exception& e) {
      error = e.what();
      failed = true;
    }
  });
  std::string send_error;
  std::thread sender([&] {
    try {
      enter_namespace(hosts.namespace_of(from));
      while (!listening && !failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (failed) return;
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot connect to " + hosts.address(to) + ": " +
                                 std::strerror(errno));
      }
      std::vector<char> buffer(1 << 20, 'x');
      const auto end = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int>(seconds * 1000));
      while (std::chrono::steady_clock::now() < end) {
        if (::send(fd, buffer.data(), buffer.size(), MSG_NOSIGNAL) < 0) {
          ::close(fd);
          throw std::runtime_error(std::string("send failed: ") + std::strerror(errno));
        }
      }
      ::close(fd);
    } catch (const std::exception& e) {
      send_error = e.what();
      if (!listening) failed = true;
    }
  });
  sender.join();
  if (!send_error.empty() && listening) {
    // Unblock the receiver's accept: connect once and close.
    std::thread poke([&] {
      try {
        enter_namespace(hosts.namespace_of(to));
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
        ::close(fd);
      } catch (const std::exception&) {
      }
    });
    poke.join();
  }
  receiver.join();
  if (!send_error.empty()) throw std::runtime_error("link bound: " + send_error);
  if (failed) throw std::runtime_error("link bound: " + error);
  if (receive_seconds <= 0) throw std::runtime_error("link bound: nothing arrived");
  return static_cast<double>(received) / receive_seconds;
}

}  // namespace ravnest::local
