#include "libs/base/toml_error.h"

#include "libs/base/printable.h"

namespace ravnest::base {

ConfigError toml_syntax_error(const std::string& origin, size_t line, size_t column,
                              std::string_view description) {
  return ConfigError(origin + ": malformed TOML at line " + std::to_string(line) + ", column " +
                     std::to_string(column) + ": " + printable(description, 200));
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    throw toml_syntax_error(origin, begin.line, begin.column, error.description());
  }
}

}  // namespace ravnest::base
