// A JSON error (nlohmann's exception) as the one-line ConfigError every reader of a JSON file
// throws: "<origin>: malformed JSON: <what>", without nlohmann's "[json.exception.parse_error.101] "
// prefix (the rest names the line and column, which is what a user needs).
#pragma once

#include <string>

#include "libs/base/config_error.h"

namespace ravnest::base {

ConfigError json_syntax_error(const std::string& origin, const std::string& what);

}  // namespace ravnest::base
