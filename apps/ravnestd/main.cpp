// ravnestd: the provider daemon. Until the pipeline issue lands it only reads its flags and its
// node metadata, and says what it would serve.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "libs/config/node_metadata.h"

int main(int argc, char** argv) {
  CLI::App app{"ravnestd: serves one provider node of a ravnest plan"};
  std::string node;
  std::string plan_dir = "node_data";
  std::string config;
  app.add_option("--node", node, "node name, e.g. node_3")->required();
  app.add_option("--plan", plan_dir, "plan directory written by ravnest clusterize")
      ->capture_default_str();
  app.add_option("--config", config, "daemon configuration (TOML)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    auto metadata = ravnest::config::load_node_metadata(plan_dir + "/nodes/" + node + ".json");
    std::cout << "Node(" << metadata.node_id << ", Cluster(" << metadata.cluster << ")) "
              << ravnest::config::role_name(metadata.role) << " at " << metadata.address
              << ": serving is not built yet (see issue 3)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ravnestd: error: " << e.what() << '\n';
    return 1;
  }
}
