#include "libs/config/pool/tls_fingerprint.h"

#include <cctype>

namespace ravnest::config {

namespace {

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> canonical_fingerprint(std::string_view text) {
  for (std::string_view prefix : {"sha256 fingerprint=", "sha256:"}) {
    if (starts_with_nocase(text, prefix)) {
      text.remove_prefix(prefix.size());
      break;
    }
  }
  // Colons, if any, separate every byte: "3F:9A:..." (95 characters).
  const bool colons = text.find(':') != std::string_view::npos;
  std::string hex;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (colons && i % 3 == 2) {
      if (c != ':') return std::nullopt;
      continue;
    }
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    hex.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (hex.size() != 64) return std::nullopt;
  if (colons && text.size() != 95) return std::nullopt;
  return hex;
}

}  // namespace ravnest::config
