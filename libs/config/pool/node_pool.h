// NodePool: the provider machines a requester may use, read from Ravnest's node_configs.json
// or the same content as TOML.
//
//   {"0": {"IP": "host:port", "benchmarks": {"ram": 8, "bandwidth": 20, "gflops": 50},
//          "tls_fingerprint": "3F:9A:..."}, ...}
//
// ram is in GB (10^9 bytes, as Ravnest's users read it), bandwidth in Mbps, gflops optional
// (a relative compute figure; absent means every node counts as equal). tls_fingerprint is
// optional: the SHA-256 of the certificate the node's daemon shows (--tls-cert), which every
// party then requires of it (tls_fingerprint.h, docs/security.md). Keys are node ids;
// the node's name is "node_<id>". Nodes come out sorted by id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::config {

struct NodeConfig {
  int id = 0;                 // the key in node_configs.json
  std::string name;           // "node_<id>"
  std::string address;        // "host:port" as written in "IP"
  std::string host;
  int port = 0;
  double ram_gb = 0;
  double bandwidth_mbps = 0;
  double gflops = 0;          // 0 when absent
  double gpu_memory_gb = 0;   // benchmarks.gpu_memory: its GPU's memory; 0 when absent
  std::string tls_fingerprint;  // canonical (tls_fingerprint.h); empty: not pinned

  double ram_bytes() const { return ram_gb * 1e9; }
  double gpu_memory_bytes() const { return gpu_memory_gb * 1e9; }
  double bandwidth_bytes_per_second() const { return bandwidth_mbps * 1e6 / 8; }
};

// Reads .json or .toml (by extension; anything else is tried as JSON). Throws ConfigError
// whose message names the file and the field, e.g.
//   node_data/node_configs.json: node "2": benchmarks.ram must be a positive number
std::vector<NodeConfig> load_node_pool(const std::string& path);

// The same from text already in memory; `origin` names it in errors, `toml` selects the syntax.
std::vector<NodeConfig> parse_node_pool(const std::string& text, const std::string& origin, bool toml);

// The pool's node called `name` (e.g. "node_5"). Throws ConfigError naming `origin` (the pool's
// file) when there is none: `node_data/node_configs.json: no node "node_9" in the pool`.
const NodeConfig& pool_node(const std::vector<NodeConfig>& pool, const std::string& name,
                            const std::string& origin);

}  // namespace ravnest::config
