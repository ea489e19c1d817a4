#include "libs/config/safe_path.h"

#include "libs/config/config_error.h"

namespace ravnest::config {
namespace {

constexpr size_t kMaxNameLength = 200;

bool allowed(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

// At most 60 characters of the name, non-printable bytes escaped, for the message.
std::string shown(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (name.size() > 60) out += "...";
  return out;
}

// Empty when acceptable, else why not.
std::string problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameLength) return "is longer than 200 characters";
  if (name.front() == '.') return "starts with a dot";
  for (unsigned char c : name) {
    if (c == '/') return "contains '/': a file name, not a path, is expected";
    if (!allowed(c)) return "may only contain letters, digits, '.', '_' and '-'";
  }
  return {};
}

}  // namespace

bool is_plain_file_name(const std::string& name) { return problem(name).empty(); }

std::filesystem::path child_path(const std::filesystem::path& dir, const std::string& name) {
  const std::string why = problem(name);
  if (!why.empty()) throw ConfigError("file name \"" + shown(name) + "\" " + why);
  return dir / name;
}

std::filesystem::path child_relative_path(const std::filesystem::path& dir,
                                          const std::string& relative) {
  std::filesystem::path out = dir;
  size_t start = 0;
  while (true) {
    const size_t slash = relative.find('/', start);
    const std::string part =
        relative.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    const std::string why = problem(part);
    if (!why.empty()) {
      throw ConfigError("path \"" + shown(relative) + "\": component \"" + shown(part) + "\" " +
                        why);
    }
    out /= part;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

}  // namespace ravnest::config
