#include "libs/base/safe_path.h"

#include <cstdint>

#include "libs/base/config_error.h"
#include "libs/base/printable.h"

namespace ravnest::base {
namespace {

constexpr size_t kMaxNameLength = 200;

// Printable ASCII but the path separators: a user's "my data (1).csv" is a file name.
bool allowed_ascii(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '/' && c != '\\'; }

// The length of the well-formed UTF-8 sequence at name[i] of a printable code point (U+00A0 and
// up: no C1 controls, no surrogates, no overlong forms), or 0. Such names are shown through
// printable() (escaped) in logs and errors, and are valid in JSON.
size_t utf8_length(const std::string& name, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(name[k]); };
  const unsigned char lead = byte(i);
  size_t length;
  uint32_t code;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    code = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    code = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > name.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  const uint32_t smallest[] = {0, 0, 0xa0, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10ffff) return 0;
  if (code >= 0xd800 && code <= 0xdfff) return 0;
  return length;
}

// At most 60 characters of the name, non-printable bytes and quotes escaped, for the message.
std::string shown(const std::string& name) { return printable_quoted(name, 60); }

// Empty when acceptable, else why not.
std::string problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameLength) return "is longer than 200 bytes";
  if (name.front() == '.') return "starts with a dot";
  for (size_t i = 0; i < name.size();) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '/') return "contains '/': a file name, not a path, is expected";
    if (allowed_ascii(c)) {
      ++i;
      continue;
    }
    const size_t length = c >= 0x80 ? utf8_length(name, i) : 0;
    if (length == 0) {
      return "may only contain printable characters in UTF-8 (no control characters, no '\\')";
    }
    i += length;
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

namespace {

// `path` as a real directory: created when missing, refused when a symlink or not a directory.
void real_directory(const std::filesystem::path& path) {
  std::error_code ec;
  auto status = std::filesystem::symlink_status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    std::filesystem::create_directory(path, ec);  // a race with another creator is fine
    status = std::filesystem::symlink_status(path, ec);
    if (ec) throw ConfigError(path.string() + ": cannot create: " + ec.message());
  }
  if (std::filesystem::is_symlink(status)) {
    throw ConfigError(path.string() + " is a symlink; ravnestd writes only inside its data "
                      "directory: make it a directory of its own");
  }
  if (!std::filesystem::is_directory(status)) {
    throw ConfigError(path.string() + " is not a directory");
  }
}

}  // namespace

void create_directories_within(const std::filesystem::path& base,
                               const std::filesystem::path& dir) {
  const std::filesystem::path below = dir.lexically_relative(base);
  if (below.empty() || below == "." || *below.begin() == "..") {
    throw ConfigError(dir.string() + " is not under " + base.string());
  }
  // The base itself may be reached through a symlink (/var/lib/ravnest -> /data/ravnest).
  std::error_code ec;
  if (!std::filesystem::is_directory(base, ec)) {
    throw ConfigError(base.string() + " is not a directory");
  }
  std::filesystem::path at = base;
  for (const auto& part : below) {
    if (part == ".") continue;
    at /= part;
    real_directory(at);
  }
}

}  // namespace ravnest::base
