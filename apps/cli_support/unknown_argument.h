// The one-line message for a command line that names an unknown subcommand or option, with the
// nearest known name (libs/base/nearest_name.h):
//   ravnest: unknown command "trian"; did you mean "train"?
//   ravnest replace: unknown option "--wiht"; did you mean "--with"?
// CLI11 itself says "A subcommand is required" or "The following arguments were not expected",
// which names neither the typo nor the fix. Pure; any thread.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace ravnest::cli {

// The exit code of that message (as a usage error in most tools), not CLI11's parse codes.
inline constexpr int kUnknownArgumentExit = 2;

// Walks argv (argv[0] is the program) through `app`'s subcommands as CLI11 would and returns the
// message for the first word that is neither a known subcommand where one is required nor a
// known option of the command it follows; nullopt when every word is known. Meant for after
// CLI11 refused the line, to replace its message: an option's value that looks like an option
// (a negative number) is never taken for one.
std::optional<std::string> unknown_argument_message(const std::string& program,
                                                    const CLI::App& app, int argc,
                                                    const char* const* argv);

}  // namespace ravnest::cli
