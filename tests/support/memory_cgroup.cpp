#include "tests/support/memory_cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ravnest::test {

namespace fs = std::filesystem;

namespace {

// The memory controller's hierarchy as this process sees it.
struct Hierarchy {
  fs::path mount;  // where it is mounted
  fs::path own;    // this process's cgroup in it
  bool v2 = false;
};

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, by);) parts.push_back(part);
  return parts;
}

bool has_token(const std::string& list, const std::string& token, char by) {
  for (const auto& t : split(list, by)) {
    if (t == token) return true;
  }
  return false;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes as `echo TEXT > PATH` does: one write(2), whose error is the kernel's answer.
void put(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const bool written =
      fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!written) {
    throw std::runtime_error("cannot write \"" + text + "\" to " + path.string() + ": " +
                             std::strerror(error));
  }
}

int64_t number(const std::string& text, const fs::path& origin) {
  std::string word;
  std::istringstream(text) >> word;
  if (word == "max") return std::numeric_limits<int64_t>::max();
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    throw std::runtime_error(origin.string() + ": not a number: \"" + text + "\"");
  }
}

// The value of line "KEY N" of a flat keyed file (memory.oom_control, memory.events); -1 when
// the file has no such line.
int64_t keyed(const fs::path& path, const std::string& key) {
  std::istringstream in(slurp(path));
  for (std::string name, value; in >> name >> value;) {
    if (name == key) return number(value, path);
  }
  return -1;
}

// The cgroup `path` (as /proc/self/cgroup names it) under a mount whose root is `root`.
fs::path under_mount(const std::string& mount, const std::string& root, const std::string& path) {
  std::string rest = path;
  if (root != "/" && rest.rfind(root, 0) == 0) rest = rest.substr(root.size());
  else if (root != "/") rest = "/";  // outside what is mounted here: the mount itself
  return fs::path(mount) / fs::path(rest).relative_path();
}

// v1's memory controller where mounted, else v2's unified hierarchy where it offers memory.
Hierarchy find_hierarchy() {
  std::string v1_mount, v1_root, v2_mount, v2_root;
  std::istringstream mounts(slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    const auto fields = split(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 6 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    const std::string super = dash + 3 < fields.size() ? fields[dash + 3] : "";
    if (type == "cgroup" && has_token(super, "memory", ',') && v1_mount.empty()) {
      v1_root = fields[3];
      v1_mount = fields[4];
    } else if (type == "cgroup2" && v2_mount.empty()) {
      v2_root = fields[3];
      v2_mount = fields[4];
    }
  }
  std::string v1_path = "/", v2_path = "/";
  std::istringstream groups(slurp("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);) {
    // ID:CONTROLLERS:PATH (the path may hold ':')
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (has_token(controllers, "memory", ',')) v1_path = path;
    if (line.rfind("0::", 0) == 0) v2_path = path;
  }
  if (!v1_mount.empty()) return {v1_mount, under_mount(v1_mount, v1_root, v1_path), false};
  if (!v2_mount.empty()) {
    const auto controllers = slurp(fs::path(v2_mount) / "cgroup.controllers");
    if (!has_token(controllers.substr(0, controllers.find('\n')), "memory", ' ')) {
      throw std::runtime_error("the cgroup v2 hierarchy at " + v2_mount +
                               " offers no memory controller, and no v1 hierarchy has it");
    }
    return {v2_mount, under_mount(v2_mount, v2_root, v2_path), true};
  }
  throw std::runtime_error("no cgroup hierarchy with the memory controller is mounted");
}

// v2: a child of `parent` gets memory.* files only when the parent's cgroup.subtree_control
// has "memory"; adding it fails in a cgroup that holds processes, unless it is the root.
void enable_memory_below(const fs::path& parent) {
  const auto control = parent / "cgroup.subtree_control";
  const auto enabled = slurp(control);
  if (has_token(enabled.substr(0, enabled.find('\n')), "memory", ' ')) return;
  put(control, "+memory");
}

std::string unique_name() {
  static std::atomic<int> next{0};
  return "ravnest-test-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
}

}  // namespace

MemoryCgroup::MemoryCgroup(int64_t limit_bytes) {
  const Hierarchy hierarchy = find_hierarchy();
  v2_ = hierarchy.v2;
  std::vector<fs::path> parents = {hierarchy.own};
  if (hierarchy.own != hierarchy.mount) parents.push_back(hierarchy.mount);
  std::string why;
  for (const auto& parent : parents) {
    const fs::path path = parent / unique_name();
    bool made = false;
    try {
      if (v2_) enable_memory_below(parent);
      std::error_code error;
      made = fs::create_directory(path, error);
      if (!made) {
        throw std::runtime_error("cannot create a memory cgroup in " + parent.string() + ": " +
                                 (error ? error.message() : "it exists"));
      }
      if (v2_) {
        put(path / "memory.max", std::to_string(limit_bytes));
        if (fs::exists(path / "memory.swap.max")) put(path / "memory.swap.max", "0");
      } else {
        // The memory limit first: memsw must never be below it.
        put(path / "memory.limit_in_bytes", std::to_string(limit_bytes));
        if (fs::exists(path / "memory.memsw.limit_in_bytes")) {
          put(path / "memory.memsw.limit_in_bytes", std::to_string(limit_bytes));
        }
      }
      path_ = path;
      return;
    } catch (const std::exception& e) {
      if (made) ::rmdir(path.c_str());
      why = e.what();
    }
  }
  throw std::runtime_error(why);
}

MemoryCgroup::~MemoryCgroup() {
  using Clock = std::chrono::steady_clock;
  try {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (auto left = pids(); !left.empty() && Clock::now() < deadline; left = pids()) {
      for (pid_t pid : left) ::kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The kernel may take a moment after the last process left before the cgroup can go.
    int error = 0;
    while (::rmdir(path_.c_str()) != 0) {
      error = errno;
      if (error != EBUSY || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (fs::exists(path_)) {
      std::cerr << "warning: cannot remove the memory cgroup " << path_.string() << ": "
                << std::strerror(error) << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "warning: removing the memory cgroup " << path_.string() << ": " << e.what()
              << "\n";
  }
}

std::string MemoryCgroup::unavailable_reason() {
  static const std::string reason = [] {
    try {
      MemoryCgroup probe(64 << 20);
      probe.limit_bytes();
      probe.peak_bytes();  // v2 has memory.peak from Linux 5.19 on
      probe.oom_kills();
      return std::string();
    } catch (const std::exception& e) {
      return std::string("memory cgroups cannot be made here: ") + e.what();
    }
  }();
  return reason;
}

void MemoryCgroup::add(pid_t pid) { put(procs_file(), std::to_string(pid)); }

std::vector<pid_t> MemoryCgroup::pids() const {
  std::vector<pid_t> pids;
  std::istringstream in(slurp(procs_file()));
  for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

int64_t MemoryCgroup::limit_bytes() const {
  const auto file = path_ / (v2_ ? "memory.max" : "memory.limit_in_bytes");
  return number(slurp(file), file);
}

int64_t MemoryCgroup::usage_bytes() const {
  const auto file = path_ / (v2_ ? "memory.current" : "memory.usage_in_bytes");
  return number(slurp(file), file);
}

int64_t MemoryCgroup::peak_bytes() const {
  const auto file = path_ / (v2_ ? "memory.peak" : "memory.max_usage_in_bytes");
  return number(slurp(file), file);
}

int64_t MemoryCgroup::oom_kills() const {
  return v2_ ? keyed(path_ / "memory.events", "oom_kill")
             : keyed(path_ / "memory.oom_control", "oom_kill");
}

int64_t MemoryCgroup::failcnt() const {
  if (v2_) return keyed(path_ / "memory.events", "max");
  // A charge tries memory+swap first: with both limits equal, that counter is the one that
  // trips, and memory.failcnt stays 0.
  int64_t count = 0;
  for (const char* name : {"memory.failcnt", "memory.memsw.failcnt"}) {
    const auto file = path_ / name;
    if (fs::exists(file)) count += number(slurp(file), file);
  }
  return count;
}

}  // namespace ravnest::test
