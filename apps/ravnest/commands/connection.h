// How a subcommand reaches the plan's daemons: the plan directory, the shared secret, TLS or not
// (--plan, --secret-file, --insecure, the same on every subcommand that talks to daemons).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "libs/config/pool/node_pool.h"
#include "libs/requester/requester.h"

namespace ravnest::cli {

struct Connection {
  std::string plan_dir = "node_data";
  std::string secret_file;  // empty: $RAVNEST_SECRET_FILE, else default_secret_file, else none
  bool insecure = false;    // plain TCP instead of TLS (benchmarks only)

  // The secret read from secret_file (or $RAVNEST_SECRET_FILE); empty when neither names a file
  // (daemons without a secret take that). Throws "secret missing: ..." naming the file and
  // where it was named when it does not exist or cannot be read.
  std::string secret() const;
  // A requester for the plan of plan_dir (warns on stderr when insecure). Throws naming the plan
  // file or the secret file.
  requester::Requester open() const;
  // One line on stderr when insecure.
  void warn_if_insecure() const;
};

// The secret `ravnest local` wrote, found with no flag: <plan_dir>/secret, else node_data/secret
// (relative to the working directory), when it is a regular file; else "".
std::string default_secret_file(const std::string& plan_dir);
// A daemon's refusal ("refused: wrong secret") as the user should read it: when secret() found
// no file named, "secret missing: neither --secret-file nor ..., and the daemons want one (...)";
// else `error` as it is.
std::string explain_refusal(const std::string& error);

// Adds --plan, --secret-file and --insecure to `cmd`, parsed into `c` (which must outlive the
// parse).
void add_connection_options(CLI::App* cmd, Connection& c);

// The node pool a subcommand takes new nodes from (--nodes: `ravnest join`'s providers,
// `ravnest replace`'s spare).
struct PoolNodes {
  std::string path = "node_data/node_configs.json";
  // The pool's nodes of `names`, in that order. Throws naming the pool file (unreadable, bad) or
  // the name it lacks.
  std::vector<config::NodeConfig> named(const std::vector<std::string>& names) const;
};
// Adds --nodes to `cmd`, parsed into `pool` (which must outlive the parse).
void add_pool_option(CLI::App* cmd, PoolNodes& pool);

}  // namespace ravnest::cli
