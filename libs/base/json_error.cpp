#include "libs/base/json_error.h"

namespace ravnest::base {

ConfigError json_syntax_error(const std::string& origin, const std::string& what) {
  std::string reason = what;
  if (!reason.empty() && reason.front() == '[') {
    const auto close = reason.find("] ");
    if (close != std::string::npos) reason = reason.substr(close + 2);
  }
  return ConfigError(origin + ": malformed JSON: " + reason);
}

}  // namespace ravnest::base
