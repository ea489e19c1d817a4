// Text from a file or a peer, made safe to put into one line of an error or a log: printable
// ASCII stays, every other byte (line breaks, escapes, UTF-8) becomes \xNN, so that a hostile
// value can neither forge log lines nor move a terminal's cursor.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace ravnest::base {

// At most `limit` bytes of `text` are shown, followed by "..." when it was longer.
std::string printable(std::string_view text,
                      size_t limit = std::numeric_limits<size_t>::max());

// The same, for text shown between double quotes: '"' and '\\' are escaped too (\x22, \x5c), so
// that the quotes around it are the only ones.
std::string printable_quoted(std::string_view text,
                             size_t limit = std::numeric_limits<size_t>::max());

}  // namespace ravnest::base
