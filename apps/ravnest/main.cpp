// ravnest: the requester's command line. Each subcommand lives in commands/<name>.cpp (its flags
// and what it runs); this file lists them, parses, and gives every failure the same form: one
// line "ravnest: error: ..." on stderr and exit code 1; an unknown subcommand or option is named
// with the nearest known one (exit 2). The hidden `ravnest --dump-options` prints the command line
// as JSON, from which the .deb's man pages and completion are made (packaging/generate/).
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/cli_support/cli_description.h"
#include "apps/cli_support/unknown_argument.h"
#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/torch_support/torch_errors.h"
#include "ravnest_version.h"

int main(int argc, char** argv) {
  using namespace ravnest;
  CLI::App app{"ravnest: train PyTorch models across many ordinary machines"};
  app.set_version_flag("--version", "ravnest " RAVNEST_VERSION " (commit " RAVNEST_COMMIT ", " +
                                        torch_support::torch_description() + ")");
  app.require_subcommand(1);

  std::vector<cli::Command> commands;
  commands.push_back(cli::add_clusterize(app));
  commands.push_back(cli::add_push(app));
  for (auto& command : cli::add_train_and_resume(app)) commands.push_back(std::move(command));
  commands.push_back(cli::add_replace(app));
  commands.push_back(cli::add_join(app));
  commands.push_back(cli::add_status(app));
  commands.push_back(cli::add_losses(app));
  commands.push_back(cli::add_stop(app));
  commands.push_back(cli::add_fuse(app));
  commands.push_back(cli::add_predict(app));
  commands.push_back(cli::add_dashboard(app));
  commands.push_back(cli::add_evaluate(app));
  commands.push_back(cli::add_probe_memory(app));
  commands.push_back(cli::add_bench(app));
  commands.push_back(cli::add_local(app));
  commands.push_back(cli::add_pool(app));
  commands.push_back(cli::add_tracker(app));

  if (cli::wants_cli_description(argc, argv)) {
    std::cout << cli::describe_cli(app).dump(2) << '\n';
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (auto message = cli::unknown_argument_message("ravnest", app, argc, argv)) {
        std::cerr << *message << '\n';
        return cli::kUnknownArgumentExit;
      }
    }
    return app.exit(e);
  }
  try {
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const std::exception& e) {
    // One line: a LibTorch error without its backtrace, any other message folded.
    // A refusal without a secret given says that the secret is missing, not wrong.
    std::cerr << "ravnest: error: " << cli::explain_refusal(torch_support::torch_message(e))
              << '\n';
    return 1;
  }
  return 0;
}
