// File names that arrive from outside (a peer's message, a request) become paths under a
// directory we own only through child_path(): a plain file name, never a path, so it can never
// escape that directory.
#pragma once

#include <filesystem>
#include <string>

namespace ravnest::config {

// dir / name when `name` is a plain file name: 1 to 200 characters from [A-Za-z0-9._-], not
// starting with a dot (so neither "." nor ".." nor hidden files). Otherwise throws ConfigError
// "file name \"...\": why" (the name shown with non-printable bytes escaped).
std::filesystem::path child_path(const std::filesystem::path& dir, const std::string& name);

// Whether child_path would accept `name`.
bool is_plain_file_name(const std::string& name);

// dir / relative when `relative` is one or more plain file names (as child_path accepts them)
// joined by single '/': "a.csv", "MNIST/raw/train-images-idx3-ubyte". Otherwise throws
// ConfigError naming the path and the component at fault.
std::filesystem::path child_relative_path(const std::filesystem::path& dir,
                                          const std::string& relative);

}  // namespace ravnest::config
