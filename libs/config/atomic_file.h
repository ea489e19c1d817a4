// Writing user-visible files so that a reader never sees half of one: the bytes go to a
// temporary file in the same directory, are flushed, then renamed over the target.
#pragma once

#include <string>

namespace ravnest::config {

// Throws std::runtime_error naming the path when anything fails; the target is untouched then.
void write_file_atomically(const std::string& path, const std::string& bytes);

std::string read_file(const std::string& path);  // throws ConfigError naming the path

}  // namespace ravnest::config
