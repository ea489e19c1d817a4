// One subcommand of `ravnest`: each commands/<name>.cpp registers its flags on the app and says
// what runs once the command line names it. main.cpp only lists them (commands.h), parses, and
// turns an exception into the one-line error and exit code every subcommand shares.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ravnest::cli {

struct Command {
  CLI::App* app = nullptr;  // the subcommand, owned by the CLI::App it was added to
  // Runs the command after a successful parse; returns the process's exit code and throws
  // std::exception with a one-line message on failure. Owns the values its flags were parsed
  // into.
  std::function<int()> run;
};

}  // namespace ravnest::cli
