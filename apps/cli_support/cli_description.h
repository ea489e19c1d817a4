// The command line as data: every subcommand and option a CLI11 App knows, as JSON, printed by
// the hidden `ravnest --dump-options` and `ravnestd --dump-options`. The man pages and the shell
// completion of the .deb are generated from it at build time (packaging/generate/), so they
// cannot drift from the flags the programs really take. Pure; call after every flag is added.
#pragma once

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

namespace ravnest::cli {

// {"name", "description", "options": [...], "positionals": [...], "subcommands": [...]} for
// `app` and, recursively, its visible subcommands (a subcommand or option in the group "" is
// hidden: CLI11's own convention, as `probe-memory` is). Each option: "names" (long then short,
// with dashes), "value" (CLI11's type name, empty for a flag), "description", "default" (as
// --help shows it, empty if none), "required", "multiple" (takes several values).
nlohmann::json describe_cli(const CLI::App& app);

// The flag that prints describe_cli: argv is exactly `PROGRAM --dump-options`.
bool wants_cli_description(int argc, char** argv);

}  // namespace ravnest::cli
