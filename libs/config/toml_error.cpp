#include "libs/config/toml_error.h"

#include "libs/config/printable.h"

namespace ravnest::config {

ConfigError toml_syntax_error(const std::string& origin, size_t line, size_t column,
                              std::string_view description) {
  return ConfigError(origin + ": malformed TOML at line " + std::to_string(line) + ", column " +
                     std::to_string(column) + ": " + printable(description, 200));
}

}  // namespace ravnest::config
