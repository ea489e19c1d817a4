// NamespaceHosts: a set of "hosts" on this machine, one network namespace each, all on one L2
// segment (scripts/wan's bridge mode: --delay 0), optionally shaped by tbf to a rate. Daemons
// started in them (LocalDaemons::set_hosts) reach each other over TCP through veth links, as on
// separate machines: the shared-memory path cannot hide the TCP one. Issue 27, part 1.
//
// The constructor runs `scripts/wan up N --delay 0 --name NAME [--rate R]` and the destructor
// `scripts/wan down --name NAME`, so the namespaces go however the owner ends (exceptions,
// failed assertions). A process killed by SIGKILL leaves them: `scripts/wan down --name NAME`.
// Needs root and iproute2: hosts_unavailable() says why not before anything is tried.
// Blocking (runs processes); any thread.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ravnest::local {

// Thrown when namespaces cannot be made here (not root, no `ip`, no scripts/wan).
struct HostsUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Empty when namespaces can be made here; else why not (one line).
std::string hosts_unavailable();

// A name for a set of namespaces unique on this machine: PREFIX<pid % 1000><letter>, the letter
// counting the sets this process made (so that one set's name is never another's prefix).
std::string unique_hosts_name(const std::string& prefix);

class NamespaceHosts {
 public:
  // `rate`: tc's rate on both ends of each node's link ("1gbit", "100mbit"); "" or "none":
  // unshaped. `name`: at most 10 characters (interface names). The last `behind_nat` hosts sit
  // behind a NAT each (scripts/wan --nat: iptables masquerade, no port forward): they reach the
  // bridge, nothing reaches them. `slow` ("I:RATE"): host I's link at RATE. Throws
  // HostsUnavailable, or std::runtime_error with scripts/wan's output when it fails.
  NamespaceHosts(std::string name, int nodes, std::string rate = "", int behind_nat = 0,
                 std::string slow = "");
  ~NamespaceHosts();
  NamespaceHosts(const NamespaceHosts&) = delete;
  NamespaceHosts& operator=(const NamespaceHosts&) = delete;

  size_t size() const { return addresses_.size(); }
  const std::string& name() const { return name_; }
  const std::string& rate() const { return rate_; }  // "" when unshaped
  std::string namespace_of(size_t i) const { return name_ + std::to_string(i); }
  // Host i's IPv4 address: it listens there, and everyone (this namespace too) reaches it there.
  // Behind NAT, the address it listens at, which only its own namespace reaches.
  const std::string& address(size_t i) const { return addresses_.at(i); }
  bool behind_nat(size_t i) const { return natted_.at(i); }
  // This (the calling) namespace's address on the hosts' bridge: every host reaches it.
  const std::string& bridge_address() const { return bridge_address_; }

 private:
  std::string name_;
  std::string rate_;
  std::vector<std::string> addresses_;
  std::vector<bool> natted_;
  std::string bridge_address_;
};

// Moves the calling thread into network namespace `ns` (/run/netns/NS): sockets it opens from
// then on live there. Throws std::runtime_error naming the namespace.
void enter_namespace(const std::string& ns);

// The link's bound, measured: one TCP stream from host `from` to host `to` for `seconds`, as
// many bytes as it takes (two threads of this process, each in its namespace). Bytes per second
// received. Throws std::runtime_error when the stream fails.
double measure_link_bandwidth(const NamespaceHosts& hosts, size_t from, size_t to,
                              double seconds = 2.0, int port = 19777);

}  // namespace ravnest::local
