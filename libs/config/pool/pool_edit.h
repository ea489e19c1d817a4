// Adding a node to a pool file's text and removing one (`ravnest pool add/remove`). The file
// keeps its syntax (JSON or TOML) and every field it has; a JSON pool is rewritten with
// two-space indents, a TOML one as toml++ formats it. Pure: no file is touched; the caller writes
// the result atomically. Errors are ConfigError, one line naming `origin` and the node or field.
#pragma once

#include <optional>
#include <string>

namespace ravnest::config {

struct NewPoolNode {
  int id = 0;               // the pool key; named node_<id>
  std::string address;      // host:port
  double ram_gb = 0;        // > 0
  double bandwidth_mbps = 0;  // > 0
  std::optional<double> gpu_memory_gb;  // > 0 when given
};

// "7" or "node_7" -> 7; throws ConfigError for anything else.
int pool_node_id(const std::string& name);

// The pool with `node` added. Refuses a name or address the pool already has, and numbers that
// are not positive; the result is checked as load_node_pool would.
std::string add_pool_node(const std::string& text, bool toml, const std::string& origin,
                          const NewPoolNode& node);

// The pool without node `id`; refuses a node the pool does not have.
std::string remove_pool_node(const std::string& text, bool toml, const std::string& origin, int id);

}  // namespace ravnest::config
