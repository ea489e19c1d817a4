#include "libs/base/byte_size.h"

#include <cctype>
#include <cstdio>
#include <limits>

namespace ravnest::base {

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 999.5 && unit < 5) {
    value /= 1000;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, value < 9.995 ? "%.2f %s" : value < 99.95 ? "%.1f %s" : "%.0f %s",
                  value, units[unit]);
  }
  return text;
}

namespace {

struct Unit {
  const char* name;  // lower case
  uint64_t bytes;
};

constexpr uint64_t kKi = 1024;
constexpr Unit kUnits[] = {{"b", 1},
                           {"kb", 1000},
                           {"mb", 1000 * 1000},
                           {"gb", 1000ULL * 1000 * 1000},
                           {"tb", 1000ULL * 1000 * 1000 * 1000},
                           {"kib", kKi},
                           {"mib", kKi * kKi},
                           {"gib", kKi * kKi * kKi},
                           {"tib", kKi * kKi * kKi * kKi}};

const char* const kNotASize =
    "is not a size (a number of bytes, or a number and a unit: B, kB, MB, GB, TB for powers of "
    "1000, KiB, MiB, GiB, TiB for powers of 1024, e.g. \"600MiB\")";

}  // namespace

std::optional<int64_t> parse_byte_size(const std::string& text, std::string* why) {
  auto fail = [why](const std::string& reason) -> std::optional<int64_t> {
    if (why) *why = reason;
    return std::nullopt;
  };
  size_t at = 0;
  // The whole part, then at most 18 digits of fraction (enough below a byte of a TiB).
  unsigned __int128 whole = 0;
  size_t whole_digits = 0;
  for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
    whole = whole * 10 + static_cast<unsigned>(text[at] - '0');
    if (whole > std::numeric_limits<uint64_t>::max()) {
      return fail("is more than " + std::to_string(std::numeric_limits<int64_t>::max()) + " bytes");
    }
    ++whole_digits;
  }
  unsigned __int128 fraction = 0, scale = 1;
  size_t fraction_digits = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
      if (++fraction_digits > 18) continue;  // below a byte of anything this accepts
      fraction = fraction * 10 + static_cast<unsigned>(text[at] - '0');
      scale *= 10;
    }
    if (fraction_digits == 0) return fail(kNotASize);
  }
  if (whole_digits == 0) return fail(kNotASize);
  const bool spaced = at < text.size() && text[at] == ' ';
  if (spaced) ++at;
  std::string unit;
  for (; at < text.size(); ++at) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[at])));
  }
  uint64_t multiplier = 0;
  if (unit.empty()) {
    // "1.5": a fraction of a byte; "5 ": a unit left out.
    if (fraction_digits > 0 || spaced) return fail(kNotASize);
    multiplier = 1;
  } else if (unit == "k" || unit == "m" || unit == "g" || unit == "t") {
    const char upper = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    return fail(std::string("has a unit that says neither power: write ") + upper +
                "B for powers of 1000 or " + upper + "iB for powers of 1024");
  } else {
    for (const auto& known : kUnits) {
      if (unit == known.name) multiplier = known.bytes;
    }
    if (multiplier == 0) return fail(kNotASize);
  }
  const unsigned __int128 bytes = whole * multiplier + fraction * multiplier / scale;
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    return fail("is more than " + std::to_string(std::numeric_limits<int64_t>::max()) + " bytes");
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace ravnest::base
