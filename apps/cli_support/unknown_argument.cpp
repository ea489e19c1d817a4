#include "apps/cli_support/unknown_argument.h"

#include <cctype>
#include <vector>

#include "libs/base/nearest_name.h"

namespace ravnest::cli {
namespace {

std::vector<std::string> visible_subcommands(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_group().empty() && !sub->get_name().empty()) names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> long_options(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty()) continue;
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  }
  return names;
}

bool looks_like_number(const std::string& word) {
  return word.size() > 1 && word[0] == '-' &&
         (std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.');
}

std::string suggestion(const std::optional<std::string>& nearest, const std::string& help) {
  if (nearest) return "; did you mean \"" + *nearest + "\"?";
  return " (`" + help + " --help` lists them)";
}

}  // namespace

std::optional<std::string> unknown_argument_message(const std::string& program,
                                                    const CLI::App& app, int argc,
                                                    const char* const* argv) {
  const CLI::App* current = &app;
  std::string path = program;
  bool value_next = false;  // the word after an option that takes a value is that value
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (value_next) {
      value_next = false;
      continue;
    }
    if (word.size() > 1 && word[0] == '-' && !looks_like_number(word)) {
      const std::string name = word.substr(0, word.find('='));
      const CLI::Option* option = current->get_option_no_throw(name);
      if (option == nullptr && current->get_help_ptr() != nullptr &&
          current->get_help_ptr()->check_name(name)) {
        option = current->get_help_ptr();
      }
      if (option == nullptr) {
        return path + ": unknown option \"" + name + "\"" +
               suggestion(base::nearest_name(name, long_options(*current)), path);
      }
      value_next = option->get_expected_min() > 0 && name.size() == word.size();
      continue;
    }
    const auto subcommands = visible_subcommands(*current);
    const CLI::App* sub = nullptr;
    for (const CLI::App* candidate :
         current->get_subcommands([](const CLI::App*) { return true; })) {
      if (candidate->check_name(word)) sub = candidate;
    }
    if (sub != nullptr) {
      current = sub;
      path += " " + sub->get_name();
      continue;
    }
    if (!subcommands.empty() && current->get_require_subcommand_min() > 0) {
      return path + ": unknown command \"" + word + "\"" +
             suggestion(base::nearest_name(word, subcommands), path);
    }
    // Otherwise a positional argument of the current command.
  }
  return std::nullopt;
}

}  // namespace ravnest::cli
