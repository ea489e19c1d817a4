#include "libs/local/local_daemons.h"

#include <algorithm>

#include "libs/base/atomic_file.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ravnest::local {

namespace fs = std::filesystem;

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

static bool accepts(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}


// fork, join the cgroup and/or the network namespace, exec: what posix_spawn cannot do. Between
// fork and exec the child of a process that may have other threads only makes async-signal-safe
// calls (open, write, dup2, close, setns, execve, _exit); everything it needs is prepared before
// the fork. `procs_file` empty: no cgroup; `netns_path` empty: this network namespace;
// `die_with_parent`: SIGTERM when the thread that forked it ends (PR_SET_PDEATHSIG).
static pid_t spawn_child(const std::string& program, char* const* argv,
                         const std::string& out_path, const std::string& procs_file,
                         const std::string& netns_path, bool die_with_parent) {
  static const char kCannotJoin[] = "ravnestd: cannot join the cgroup of ";
  static const char kCannotEnter[] = "ravnestd: cannot enter the network namespace ";
  static const char kCannotExec[] = "ravnestd: cannot execute ";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // the parent, or -1
  if (die_with_parent) {
    // A parent that died before the call would never signal: then the child goes at once.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(127);
  }
  bool entered = true;
  if (!netns_path.empty()) {
    const int ns = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    entered = ns >= 0 && ::setns(ns, CLONE_NEWNET) == 0;
    if (ns >= 0) ::close(ns);
  }
  char text[24];  // the pid in decimal, written from the end
  size_t n = 0;
  for (pid_t self = ::getpid(); self > 0; self /= 10) {
    text[sizeof text - 1 - n++] = static_cast<char>('0' + self % 10);
  }
  bool joined = true;
  if (!procs_file.empty()) {
    const int cgroup = ::open(procs_file.c_str(), O_WRONLY | O_CLOEXEC);
    joined = cgroup >= 0 && ::write(cgroup, text + sizeof text - n, n) == static_cast<ssize_t>(n);
    if (cgroup >= 0) ::close(cgroup);
  }
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) ::_exit(127);
  ::dup2(out, 1);  // dup2's copies are not close-on-exec
  ::dup2(out, 2);
  if (out > 2) ::close(out);
  if (!joined) {
    (void)!::write(2, kCannotJoin, sizeof kCannotJoin - 1);
    (void)!::write(2, procs_file.c_str(), procs_file.size());
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  }
  if (!entered) {
    (void)!::write(2, kCannotEnter, sizeof kCannotEnter - 1);
    (void)!::write(2, netns_path.c_str(), netns_path.size());
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  }
  ::execve(program.c_str(), argv, environ);
  (void)!::write(2, kCannotExec, sizeof kCannotExec - 1);
  (void)!::write(2, program.c_str(), program.size());
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

std::string sibling_ravnestd() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  for (const fs::path& candidate :
       {self.parent_path() / "ravnestd", self.parent_path().parent_path() / "ravnestd/ravnestd"}) {
    if (fs::exists(candidate)) return candidate.string();
  }
  throw std::runtime_error("no ravnestd next to " + self.string());
}

LocalDaemons::LocalDaemons(std::string ravnestd, std::string dir, std::string secret_file,
                           std::vector<std::string> names, std::vector<int> ports)
    : ravnestd_(std::move(ravnestd)),
      dir_(std::move(dir)),
      secret_file_(std::move(secret_file)),
      names_(std::move(names)),
      ports_(std::move(ports)) {
  ports_.resize(names_.size(), 0);
  for (auto& port : ports_) {
    if (port == 0) port = free_loopback_port();
  }
  pids_.assign(names_.size(), -1);
}

void LocalDaemons::set_hosts(std::vector<std::string> namespaces,
                             std::vector<std::string> addresses, int port) {
  if (namespaces.size() != size() || addresses.size() != size()) {
    throw std::invalid_argument("LocalDaemons::set_hosts: one namespace and address per daemon");
  }
  namespaces_ = std::move(namespaces);
  hosts_ = std::move(addresses);
  for (auto& p : ports_) p = port;
}

LocalDaemons::~LocalDaemons() {
  for (size_t i = 0; i < size(); ++i) {
    if (pids_[i] > 0) ::kill(pids_[i], SIGTERM);
  }
  for (size_t i = 0; i < size(); ++i) {
    if (pids_[i] > 0 && wait_exit(i, 5) == -1) {
      ::kill(pids_[i], SIGKILL);
      ::waitpid(pids_[i], nullptr, 0);
    }
  }
}

std::string LocalDaemons::data_dir(size_t i) const {
  if (per_node_dirs_) return (fs::path(dir_) / names_.at(i) / "data").string();
  return (fs::path(dir_) / ("data_" + std::to_string(i))).string();
}

std::string LocalDaemons::log_path(size_t i) const {
  if (per_node_dirs_) return (fs::path(dir_) / names_.at(i) / "ravnestd.log").string();
  return (fs::path(dir_) / ("daemon_" + std::to_string(i) + ".log")).string();
}

void LocalDaemons::start(size_t i, double timeout_seconds) {
  const auto extra = flags_.find(i);
  // A --listen among the daemon's flags replaces address(i), which peers still dial (a daemon
  // reached through a relay there while it listens elsewhere).
  const bool own_listen =
      extra != flags_.end() &&
      std::find(extra->second.begin(), extra->second.end(), "--listen") != extra->second.end();
  std::vector<std::string> args = {ravnestd_,   "--node",      names_[i],  "--data-dir",
                                   data_dir(i), "--log-file",  log_path(i), "--log-level",
                                   log_level_};
  if (!own_listen) args.insert(args.end(), {"--listen", address(i)});
  if (!secret_file_.empty()) {
    args.push_back("--secret-file");
    args.push_back(secret_file_);
  }
  if (insecure_) args.push_back("--insecure");
  if (!config_file_.empty()) {
    args.push_back("--config");
    args.push_back(config_file_);
  }
  if (extra != flags_.end()) args.insert(args.end(), extra->second.begin(), extra->second.end());
  if (per_node_dirs_) fs::create_directories(fs::path(log_path(i)).parent_path());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = log_path(i) + ".out";
  pid_t pid = -1;
  const auto cgroup = cgroup_procs_.find(i);
  const std::string procs_file = cgroup != cgroup_procs_.end() ? cgroup->second : std::string();
  const std::string netns = namespaces_.empty() ? std::string() : "/run/netns/" + namespaces_[i];
  if (!procs_file.empty() || !netns.empty() || die_with_parent_) {
    pid = spawn_child(ravnestd_, argv.data(), out, procs_file, netns, die_with_parent_);
    if (pid < 0) throw std::runtime_error("cannot start " + ravnestd_ + ": fork failed");
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid, ravnestd_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + ravnestd_);
  }
  pids_[i] = pid;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_seconds * 1000));
  while (!accepts(hosts_.empty() ? "127.0.0.1" : hosts_[i], ports_[i])) {
    if (!running(i)) {
      auto text_of = [](const std::string& path) {
        try {
          return base::read_file(path);
        } catch (const std::exception&) {
          return std::string();
        }
      };
      throw std::runtime_error("ravnestd " + names_[i] + " exited: " + text_of(out) +
                               text_of(log_path(i)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("ravnestd " + names_[i] + " does not listen on " + address(i));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void LocalDaemons::start_all() {
  for (size_t i = 0; i < size(); ++i) start(i);
}

void LocalDaemons::signal(size_t i, int signal) {
  if (pids_[i] > 0) ::kill(pids_[i], signal);
}

bool LocalDaemons::running(size_t i) {
  if (pids_[i] <= 0) return false;
  int status = 0;
  if (::waitpid(pids_[i], &status, WNOHANG) == 0) return true;
  pids_[i] = -1;
  return false;
}

int LocalDaemons::wait_exit(size_t i, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pids_[i], &status, WNOHANG);
    if (r == pids_[i]) {
      pids_[i] = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace ravnest::local
