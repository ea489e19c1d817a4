#include "libs/base/printable.h"

namespace ravnest::base {
namespace {

std::string escaped(std::string_view text, size_t limit, bool quoted) {
  std::string out;
  const size_t shown = text.size() < limit ? text.size() : limit;
  out.reserve(shown);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && !(quoted && (c == '"' || c == '\\'))) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (shown < text.size()) out += "...";
  return out;
}

}  // namespace

std::string printable(std::string_view text, size_t limit) { return escaped(text, limit, false); }

std::string printable_quoted(std::string_view text, size_t limit) {
  return escaped(text, limit, true);
}

}  // namespace ravnest::base
