#include "apps/ravnest/commands/connection.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "libs/base/config_error.h"
#include "libs/base/secret.h"
#include "libs/config/pool/node_pool.h"
#include "libs/config/pool/pool_change.h"

namespace ravnest::cli {

namespace {

// Set by Connection::secret() when no file was named: why the daemons' refusal reads "wrong
// secret" (see explain_refusal).
std::string g_no_secret;

}  // namespace

std::string default_secret_file(const std::string& plan_dir) {
  for (const std::string& candidate : {plan_dir + "/secret", std::string("node_data/secret")}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
  }
  return "";
}

std::string Connection::secret() const {
  std::string file = secret_file;
  std::string named_by = "--secret-file";
  if (file.empty()) {
    if (const char* env = std::getenv("RAVNEST_SECRET_FILE")) file = env;
    named_by = "$RAVNEST_SECRET_FILE";
  }
  if (file.empty()) {
    file = default_secret_file(plan_dir);
    named_by = "no flag: the file `ravnest local` writes";
  }
  if (file.empty()) {
    // Daemons started without a secret take requesters without one; the others refuse them.
    g_no_secret = "secret missing: neither --secret-file nor $RAVNEST_SECRET_FILE names a file, "
                  "and there is no " + plan_dir + "/secret";
    return std::string();
  }
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0 && errno == ENOENT) {
    throw base::ConfigError("secret missing: " + file + " (named by " + named_by +
                            ") does not exist");
  }
  try {
    return base::read_secret(file);
  } catch (const base::ConfigError& e) {
    throw base::ConfigError(std::string("secret missing: ") + e.what() + " (named by " +
                            named_by + ")");
  }
}

std::string explain_refusal(const std::string& error) {
  if (g_no_secret.empty() || error.find("wrong secret") == std::string::npos) return error;
  return g_no_secret + ", and the daemons want one (" + error + ")";
}

// A plan directory that is also its pool's (Ravnest's node_data/) holds node_configs.json; when
// that places the plan's nodes elsewhere (`ravnest local` restarted on other ports), every call
// would fail as "connection refused": said first, in one line. A pool file that does not load is
// left to the commands that read it.
static void refuse_if_pool_moved(const requester::Plan& plan) {
  const std::filesystem::path pool = std::filesystem::path(plan.dir) / "node_configs.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(pool, ec)) return;
  std::vector<config::NodeConfig> nodes;
  try {
    nodes = config::load_node_pool(pool.string());
  } catch (const std::exception&) {
    return;
  }
  const auto moved = config::moved_nodes(plan.nodes, nodes);
  if (moved.empty()) return;
  throw base::ConfigError(
      plan.dir + ": this plan was made for another pool (" + moved[0] + " in " + pool.string() +
      (moved.size() > 1 ? "; " + std::to_string(moved.size() - 1) + " more moved" : "") +
      "): run `ravnest clusterize` again");
}

requester::Requester Connection::open() const {
  warn_if_insecure();
  requester::Plan plan = requester::load_plan(plan_dir);
  refuse_if_pool_moved(plan);
  return requester::Requester(std::move(plan), secret(), insecure);
}

void Connection::warn_if_insecure() const {
  if (insecure) {
    std::cerr << "ravnest: warning: --insecure: TLS is off; everything but the secret travels "
                 "in clear. For benchmarks only\n";
  }
}

void add_connection_options(CLI::App* cmd, Connection& c) {
  cmd->add_option("--plan", c.plan_dir, "plan directory written by clusterize")
      ->capture_default_str();
  cmd->add_option("--secret-file", c.secret_file,
                  "file holding the daemons' shared secret (default: $RAVNEST_SECRET_FILE, else "
                  "node_data/secret when it exists)");
  cmd->add_flag("--insecure", c.insecure,
                "plain TCP instead of TLS, for benchmarks only (daemons started with --insecure)");
}

std::vector<config::NodeConfig> PoolNodes::named(const std::vector<std::string>& names) const {
  const auto pool = config::load_node_pool(path);
  std::vector<config::NodeConfig> nodes;
  for (const auto& name : names) nodes.push_back(config::pool_node(pool, name, path));
  return nodes;
}

void add_pool_option(CLI::App* cmd, PoolNodes& pool) {
  cmd->add_option("--nodes", pool.path, "node pool, Ravnest's node_configs.json")
      ->capture_default_str();
}

}  // namespace ravnest::cli
