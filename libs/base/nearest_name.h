// The "did you mean" of a misspelt name: the closest of the known names, when it is close enough
// to be a typo rather than another word. Pure; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ravnest::base {

// Edits (insert, delete, substitute, swap two neighbours) between a and b: "trian" is one edit
// from "train", as a typist's slip is.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The known name with the fewest edits from `given`, if at most max(1, given.size() / 3) edits
// (so "trian" -> "train", "--wiht" -> "--with", but "foo" names nothing); the first one listed
// wins a tie. Case is ignored ("AdamW" is 0 edits from "adamw"), and `given` itself, as written,
// is never suggested. Used for commands and options (apps/cli_support), the job file's keys and
// names, the daemon's configuration.
std::optional<std::string> nearest_name(const std::string& given,
                                        const std::vector<std::string>& known);

// The end of an "unknown ..." message: `; did you mean "NAME"?` naming nearest_name, or "" when
// no known name is near.
std::string did_you_mean(const std::string& given, const std::vector<std::string>& known);

}  // namespace ravnest::base
