#include "libs/base/nearest_word.h"

#include <algorithm>
#include <cctype>

namespace ravnest::base {

size_t edit_distance(const std::string& a, const std::string& b) {
  // Three rows of the dynamic programme: the swap looks two rows back.
  std::vector<size_t> two_back(b.size() + 1), back(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) back[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({back[j] + 1, row[j - 1] + 1, back[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], two_back[j - 2] + 1);
      }
    }
    std::swap(two_back, back);
    std::swap(back, row);
  }
  return back[b.size()];
}

std::optional<std::string> nearest_word(const std::string& word, const std::vector<std::string>& known) {
  // A word of 200 characters is no typo; the bound also keeps the work small on hostile input.
  if (word.empty() || word.size() > 200) return std::nullopt;
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  const std::string folded = lower(word);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : known) {
    if (candidate == word) continue;
    const size_t d = edit_distance(folded, lower(candidate));
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace ravnest::base
