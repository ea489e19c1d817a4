#include "apps/cli_support/cli_description.h"

#include <cstring>

namespace ravnest::cli {
namespace {

nlohmann::json describe_option(const CLI::Option& option) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& name : option.get_lnames()) names.push_back("--" + name);
  for (const auto& name : option.get_snames()) names.push_back("-" + name);
  const bool flag = option.get_expected_min() == 0 && option.nonpositional();
  return {{"names", names},
          {"value", flag ? std::string() : option.get_type_name()},
          {"description", option.get_description()},
          {"default", option.get_default_str()},
          {"required", option.get_required()},
          {"multiple", option.get_items_expected_max() > 1}};
}

}  // namespace

nlohmann::json describe_cli(const CLI::App& app) {
  nlohmann::json options = nlohmann::json::array();
  nlohmann::json positionals = nlohmann::json::array();
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty()) continue;  // hidden
    if (option->nonpositional()) {
      options.push_back(describe_option(*option));
    } else {
      auto described = describe_option(*option);
      described["names"] = nlohmann::json::array({option->get_name(true)});
      positionals.push_back(described);
    }
  }
  nlohmann::json subcommands = nlohmann::json::array();
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_group().empty() || sub->get_name().empty()) continue;  // hidden or option group
    subcommands.push_back(describe_cli(*sub));
  }
  return {{"name", app.get_name()},
          {"description", app.get_description()},
          {"options", options},
          {"positionals", positionals},
          {"subcommands", subcommands}};
}

bool wants_cli_description(int argc, char** argv) {
  return argc == 2 && std::strcmp(argv[1], "--dump-options") == 0;
}

}  // namespace ravnest::cli
