// A TOML syntax error (toml++'s parse_error) as the one-line ConfigError every reader of a TOML
// file throws: "<origin>: malformed TOML at line L, column C: <what>". toml++ quotes the
// offending input in its description; it is shown through printable(), so a line break or an
// escape sequence in the file never reaches the message raw.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "libs/base/config_error.h"

namespace ravnest::base {

ConfigError toml_syntax_error(const std::string& origin, size_t line, size_t column,
                              std::string_view description);

}  // namespace ravnest::base
