// A TOML syntax error (toml++'s parse_error) as the one-line ConfigError every reader of a TOML
// file throws: "<origin>: malformed TOML at line L, column C: <what>". toml++ quotes the
// offending input in its description; it is shown through printable(), so a line break or an
// escape sequence in the file never reaches the message raw.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "libs/base/config_error.h"

namespace ravnest::base {

ConfigError toml_syntax_error(const std::string& origin, size_t line, size_t column,
                              std::string_view description);

// toml::parse(text, origin), a syntax error thrown as toml_syntax_error: the one way every TOML
// reader (job file, daemon config, node pool, [plan] block) parses. Pure; any thread.
toml::table parse_toml(const std::string& text, const std::string& origin);

}  // namespace ravnest::base
