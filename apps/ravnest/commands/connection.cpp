#include "apps/ravnest/commands/connection.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "libs/base/secret.h"

namespace ravnest::cli {

std::string default_secret_file(const std::string& plan_dir) {
  for (const std::string& candidate : {plan_dir + "/secret", std::string("node_data/secret")}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
  }
  return "";
}

std::string Connection::secret() const {
  std::string file = secret_file;
  if (file.empty()) {
    if (const char* env = std::getenv("RAVNEST_SECRET_FILE")) file = env;
  }
  if (file.empty()) file = default_secret_file(plan_dir);
  return file.empty() ? std::string() : base::read_secret(file);
}

requester::Requester Connection::open() const {
  warn_if_insecure();
  return requester::Requester(requester::load_plan(plan_dir), secret(), insecure);
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

}  // namespace ravnest::cli
