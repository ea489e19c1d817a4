// ravnest local --nodes N: N daemons on this machine for trying ravnest without a cluster (as
// torchrun --nproc_per_node). It writes DIR/node_data/secret (fresh, 0600) and
// DIR/node_data/node_configs.json (Ravnest's pool format), keeps each daemon's data and log in
// DIR/node_data/local/node_i/, and stops them on Ctrl-C (docs/local.md). One runs in a
// directory at a time (a lock held while it runs, DIR/node_data/local/lock): a second is refused
// before it writes anything, so the secret the first's daemons hold stays.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/local_pool.h"
#include "libs/local/local_daemons.h"
#include "libs/base/atomic_file.h"
#include "libs/base/secret.h"
#include "libs/requester/requester.h"

namespace ravnest::cli {
namespace {

namespace fs = std::filesystem;

struct LocalCommand {
  int nodes = 0;
  std::string gpus;
  double ram_gb = 8;
  double bandwidth_mbps = 1000;
  std::string dir = ".";
  bool force = false;
  double start_timeout = 30;

  int run() const;
};

std::optional<std::string> text_if_present(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  return base::read_file(path.string());
}

// The ravnestd beside this ravnest (installed, or the build tree), else the first on PATH.
std::string find_ravnestd() {
  try {
    return local::sibling_ravnestd();
  } catch (const std::exception&) {
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "ravnestd";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  throw std::runtime_error("no ravnestd beside " + fs::read_symlink("/proc/self/exe").string() +
                           " nor on PATH");
}

// 32 bytes of /dev/urandom, base64, into `path` created with mode 0600 from the start (never
// readable by others, not even for a moment), then renamed over the old one.
void write_fresh_secret(const fs::path& path) {
  std::string bytes(32, '\0');
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (!random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw std::runtime_error("cannot read /dev/urandom for the secret");
  }
  const std::string text = base64(bytes) + "\n";
  const std::string temp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot write the secret");
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::fchmod(fd, 0600);  // whatever the umask made of it
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    throw std::runtime_error(path.string() + ": cannot write the secret");
  }
}

// The last lines of a daemon's log and of its stdout/stderr, for the one report of its death.
std::string log_tail(const std::string& log, size_t lines = 8) {
  std::deque<std::string> tail;
  for (const std::string& path : {log + ".out", log}) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      tail.push_back(line);
      if (tail.size() > lines) tail.pop_front();
    }
  }
  std::string out;
  for (const auto& line : tail) out += "\n  " + line;
  return out;
}

// The lock of `ravnest local` in `local_dir`, held while it runs (closed, it is released; the
// kernel releases it when the process dies). Throws std::runtime_error, one line, when another
// `ravnest local` holds it, or when a daemon left there by one (killed with kill -9) still holds
// its data directory: nothing is written before.
class LocalRunLock {
 public:
  LocalRunLock(const fs::path& local_dir, const std::vector<fs::path>& data_dirs) {
    fs::create_directories(local_dir);
    const fs::path path = local_dir / "lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const std::string holder = pid_in(fd_);
      ::close(fd_);
      throw std::runtime_error("another `ravnest local`" +
                               (holder.empty() ? std::string() : " (pid " + holder + ")") +
                               " runs in " + local_dir.parent_path().parent_path().string() +
                               ": stop it (Ctrl-C) or use another --dir; nothing was written");
    }
    for (const auto& data : data_dirs) {
      const int fd = ::open((data / "lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) continue;  // never started there
      const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
      const std::string holder = held ? pid_in(fd) : std::string();
      ::close(fd);
      if (held) {
        ::close(fd_);
        throw std::runtime_error("a ravnestd" +
                                 (holder.empty() ? std::string() : " (pid " + holder + ")") +
                                 " still runs on " + data.string() + ", left by an earlier " +
                                 "`ravnest local`: stop it or use another --dir; nothing was written");
      }
    }
    const std::string self = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] const ssize_t written = ::pwrite(fd_, self.data(), self.size(), 0);
    }
  }
  ~LocalRunLock() { ::close(fd_); }
  LocalRunLock(const LocalRunLock&) = delete;
  LocalRunLock& operator=(const LocalRunLock&) = delete;

 private:
  static std::string pid_in(int fd) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    std::string pid;
    for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9'; ++i) pid += text[i];
    return pid;
  }
  int fd_ = -1;
};

int LocalCommand::run() const {
  if (nodes < 1) throw std::runtime_error("--nodes: at least 1, got " + std::to_string(nodes));
  // Each daemon is a process with its own LibTorch (hundreds of MB): more than this on one
  // machine is a typo, not a trial (each would be started and waited for in turn).
  constexpr int kMaxNodes = 256;
  if (nodes > kMaxNodes) {
    throw std::runtime_error("--nodes: at most " + std::to_string(kMaxNodes) + " daemons on one "
                             "machine, got " + std::to_string(nodes));
  }
  if (!(ram_gb > 0)) throw std::runtime_error("--ram: must be a positive number of GB");
  if (!(bandwidth_mbps > 0)) throw std::runtime_error("--bandwidth: must be a positive number of Mbps");
  const std::vector<int> gpu_list = parse_gpu_list(gpus);

  const fs::path node_data = fs::path(dir) / "node_data";
  const fs::path pool_file = node_data / "node_configs.json";
  const fs::path local_dir = node_data / "local";
  const fs::path our_copy = local_dir / "node_configs.written.json";  // what we wrote last
  const fs::path secret_file = node_data / "secret";
  // Refused before anything is written or started.
  if (!may_write_pool(text_if_present(pool_file), text_if_present(our_copy), force)) {
    throw std::runtime_error(pool_file.string() +
                             ": a pool file `ravnest local` did not write; it stays as it is "
                             "(--force replaces it, --dir D uses D/node_data instead)");
  }
  const std::string ravnestd = find_ravnestd();
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("node_" + std::to_string(i));
  // The daemons' data directories as LocalDaemons lays them out (per node: NAME/data), those of
  // an earlier run with more nodes too.
  std::vector<fs::path> data_dirs;
  std::error_code listing;
  for (fs::directory_iterator it(local_dir, listing), end; !listing && it != end; it.increment(listing)) {
    data_dirs.push_back(it->path() / "data");
  }
  const LocalRunLock running(local_dir, data_dirs);
  write_fresh_secret(secret_file);

  catch_interrupts();
  local::LocalDaemons daemons(ravnestd, local_dir.string(), secret_file.string(), names);
  daemons.set_per_node_dirs(true);
  daemons.set_die_with_parent(true);  // a `ravnest local` killed with kill -9 takes them along
  daemons.set_log_level("info");
  for (int i = 0; i < nodes; ++i) {
    const std::string device = device_for_node(i, gpu_list);
    if (!device.empty()) daemons.set_flags(i, {"--device", device});
  }

  // Each daemon answers the requester's own status call with the secret: the same door every
  // later command goes through. ~LocalDaemons stops those started if one fails.
  requester::Requester requester(requester::Plan{node_data.string(), {}},
                                 base::read_secret(secret_file.string()));
  std::vector<int> ports;
  for (int i = 0; i < nodes; ++i) {
    if (interrupted()) return 0;
    try {
      daemons.start(i, start_timeout);
    } catch (const std::exception& e) {
      throw std::runtime_error("ravnestd " + names[i] + " did not start (log " +
                               daemons.log_path(i) + "):" + log_tail(daemons.log_path(i)));
    }
    config::NodeMetadata at;
    at.node_id = i;
    at.name = names[i];
    at.address = daemons.address(i);
    const auto status = requester.status_of(at, start_timeout);
    if (status.node != names[i]) {
      throw std::runtime_error(at.address + " answers as " + status.node + ", not " + names[i]);
    }
    ports.push_back(daemons.port(i));
  }

  const std::string pool = local_pool_json(ports, ram_gb, bandwidth_mbps);
  base::write_file_atomically(our_copy.string(), pool);
  base::write_file_atomically(pool_file.string(), pool);
  std::string addresses;
  for (int i = 0; i < nodes; ++i) addresses += (i ? ", " : "") + names[i] + " " + daemons.address(i);
  say("ravnest local: " + std::to_string(nodes) + " daemons (" + addresses + "); pool " +
      pool_file.string() + ", secret " + secret_file.string() + ", logs under " +
      local_dir.string() + ". Ctrl-C stops them");

  while (!interrupted()) {
    for (int i = 0; i < nodes; ++i) {
      if (!daemons.running(i)) {
        // ~LocalDaemons stops the others (SIGTERM, then SIGKILL after a few seconds).
        throw std::runtime_error("ravnestd " + names[i] + " exited (log " + daemons.log_path(i) +
                                 "); stopping the others:" + log_tail(daemons.log_path(i)));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  say("ravnest local: stopping " + std::to_string(nodes) + " daemons");
  return 0;  // ~LocalDaemons: SIGTERM, a bounded wait, SIGKILL
}

}  // namespace

Command add_local(CLI::App& app) {
  auto c = std::make_shared<LocalCommand>();
  auto* cmd = app.add_subcommand(
      "local", "Start N daemons on this machine, with a fresh secret and a pool file, until Ctrl-C");
  cmd->add_option("--nodes", c->nodes, "how many daemons")->required();
  cmd->add_option("--gpus", c->gpus,
                  "GPU indices such as 0,1: daemon i computes on cuda:<gpus[i % count]>");
  cmd->add_option("--ram", c->ram_gb, "each node's RAM in the pool file, GB")->capture_default_str();
  cmd->add_option("--bandwidth", c->bandwidth_mbps, "each node's bandwidth in the pool file, Mbps")
      ->capture_default_str();
  cmd->add_option("--dir", c->dir, "where node_data/ goes")->capture_default_str();
  cmd->add_flag("--force", c->force, "replace a pool file that `ravnest local` did not write");
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
