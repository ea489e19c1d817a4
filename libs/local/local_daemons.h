// LocalDaemons: ravnestd processes on 127.0.0.1, for `ravnest local`, `ravnest bench` and tests.
// Each gets a free port, its own data directory and log under `dir`, and the shared secret file;
// all are stopped on destruction (SIGTERM, then SIGKILL after a few seconds). In the hosts mode
// (set_hosts) daemon i runs in network namespace i of a NamespaceHosts instead, listening on that
// host's address and a fixed port, as a daemon on a machine of its own.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ravnest::local {

int free_loopback_port();

// The ravnestd next to the running executable: in the same directory (installed), or in the
// build tree's apps/ravnestd.
std::string sibling_ravnestd();

class LocalDaemons {
 public:
  // `names[i]` is the node name daemon i serves; `ports[i]` 0 picks a free port.
  LocalDaemons(std::string ravnestd, std::string dir, std::string secret_file,
               std::vector<std::string> names, std::vector<int> ports = {});
  ~LocalDaemons();
  LocalDaemons(const LocalDaemons&) = delete;
  LocalDaemons& operator=(const LocalDaemons&) = delete;

  size_t size() const { return names_.size(); }
  int port(size_t i) const { return ports_.at(i); }
  std::string address(size_t i) const {
    return (hosts_.empty() ? std::string("127.0.0.1") : hosts_.at(i)) + ":" +
           std::to_string(ports_.at(i));
  }
  // The hosts mode: daemon i, started from now on, runs in network namespace `namespaces[i]`
  // (the child enters it between fork and exec) and listens on `addresses[i]`:`port` (each
  // namespace has its ports to itself, so one port serves all). Call before start().
  void set_hosts(std::vector<std::string> namespaces, std::vector<std::string> addresses,
                 int port = 18500);
  bool hosts() const { return !hosts_.empty(); }
  std::string data_dir(size_t i) const;
  std::string log_path(size_t i) const;

  // Daemon i keeps its data in `dir`/<name i>/data and its log in `dir`/<name i>/ravnestd.log
  // (`ravnest local`'s layout) instead of `dir`/data_i and `dir`/daemon_i.log.
  void set_per_node_dirs(bool per_node) { per_node_dirs_ = per_node; }
  // Daemons started from now on get SIGTERM when the thread that started them ends, this
  // process killed included (PR_SET_PDEATHSIG; `ravnest local`, whose main thread starts them):
  // a `ravnest local` killed with kill -9 leaves no daemon behind. Off by default: a test may
  // start daemons from a thread that ends before they should.
  void set_die_with_parent(bool die) { die_with_parent_ = die; }
  // Daemons started from now on log at this level (default "debug", for the tests).
  void set_log_level(std::string level) { log_level_ = std::move(level); }
  // Daemons started from now on run with --insecure (plain TCP instead of TLS: benchmarks).
  void set_insecure(bool insecure) { insecure_ = insecure; }
  // Daemons started from now on read this configuration file (--config), e.g. its [limits].
  void set_config_file(std::string path) { config_file_ = std::move(path); }
  // Daemon i, started from now on, gets these flags too (e.g. its own --tls-cert and --tls-key;
  // a --listen among them replaces address(i) as where it listens, not as where it is dialled).
  void set_flags(size_t i, std::vector<std::string> flags) { flags_[i] = std::move(flags); }
  // Daemon i, started from now on, runs in the cgroup whose cgroup.procs file `path` is (empty:
  // where this process runs): the child writes its own pid there between fork and exec, so that
  // the cgroup is charged from the daemon's first allocation on (a process moved after it
  // started leaves what it charged before behind, with cgroup v1). When the child cannot join
  // it exits before exec, and start() throws with its .out log, which names the file.
  void set_cgroup_procs_file(size_t i, std::string path) { cgroup_procs_[i] = std::move(path); }

  void start(size_t i, double timeout_seconds = 20);  // returns once it accepts connections
  void start_all();
  void signal(size_t i, int signal);
  pid_t pid(size_t i) const { return pids_.at(i); }  // -1 when not started or exited
  bool running(size_t i);
  int wait_exit(size_t i, double seconds);  // exit code; -1 when still running

 private:
  std::string ravnestd_;
  std::string dir_;
  std::string secret_file_;
  std::vector<std::string> names_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_;
  std::vector<std::string> namespaces_;  // the hosts mode: daemon i's network namespace
  std::vector<std::string> hosts_;       // the hosts mode: daemon i's address
  bool insecure_ = false;
  bool per_node_dirs_ = false;
  bool die_with_parent_ = false;
  std::string log_level_ = "debug";
  std::string config_file_;
  std::map<size_t, std::vector<std::string>> flags_;
  std::map<size_t, std::string> cgroup_procs_;
};

}  // namespace ravnest::local
