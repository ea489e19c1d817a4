#include "libs/base/nearest_name.h"

#include <algorithm>
#include <cctype>

namespace ravnest::base {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: Levenshtein plus the transposition of two adjacent characters.
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> nearest_name(const std::string& given,
                                        const std::vector<std::string>& known) {
  const std::size_t limit = std::max<std::size_t>(1, given.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  const auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  const std::string given_lower = lower(given);
  for (const auto& name : known) {
    if (name == given) continue;
    const std::size_t distance = edit_distance(given_lower, lower(name));
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& given, const std::vector<std::string>& known) {
  const auto nearest = nearest_name(given, known);
  return nearest ? "; did you mean \"" + *nearest + "\"?" : std::string();
}

}  // namespace ravnest::base
