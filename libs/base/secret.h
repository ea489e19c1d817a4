// The shared secret that provider daemons of one plan present to each other: one line in a file
// that only the daemon's user may read (mode 0600).
#pragma once

#include <string>
#include <string_view>

namespace ravnest::base {

// Reads the secret: the file's bytes without trailing newline characters ("\n", "\r\n").
// Throws ConfigError naming the path when the file is missing or unreadable, is not a regular
// file, is empty (or only a newline), or is larger than 64 KiB (not a secret file).
// When `readable_by_others` is given it is set to whether the group or others may read the file;
// the caller should warn then ("chmod 600 <path>"), the secret is returned all the same.
std::string read_secret(const std::string& path, bool* readable_by_others = nullptr);

// Compares in time that depends only on the lengths, not on where the strings differ.
bool secrets_equal(std::string_view a, std::string_view b);

}  // namespace ravnest::base
