// The nearest of a list of known words to a mistyped one, for "did you mean" in errors (a job
// file's keys; a command's name). Pure and thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ravnest::base {

// Edit distance counting insertions, deletions, substitutions and swaps of two adjacent
// characters (the optimal-string-alignment distance: "trian" is 1 from "train"). ASCII bytes;
// case counts.
size_t edit_distance(const std::string& a, const std::string& b);

// The known word nearest to `word` (the first of equals, in `known`'s order), if it is close
// enough to be a typo of it: at most max(2, size / 3) edits away, case ignored ("AdamW" is 0
// from "adamw"), and not `word` itself.
std::optional<std::string> nearest_word(const std::string& word, const std::vector<std::string>& known);

}  // namespace ravnest::base
