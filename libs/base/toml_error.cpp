#include "libs/base/toml_error.h"

#include "libs/base/printable.h"

namespace ravnest::base {

ConfigError toml_syntax_error(const std::string& origin, size_t line, size_t column,
                              std::string_view description) {
  return ConfigError(origin + ": malformed TOML at line " + std::to_string(line) + ", column " +
                     std::to_string(column) + ": " + printable(description, 200));
}

}  // namespace ravnest::base
