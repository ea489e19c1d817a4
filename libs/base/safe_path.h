// File names that arrive from outside (a peer's message, a request) become paths under a
// directory we own only through child_path(): a plain file name, never a path, so it can never
// escape that directory.
#pragma once

#include <filesystem>
#include <string>

namespace ravnest::base {

// dir / name when `name` is a plain file name: 1 to 200 bytes of printable characters in UTF-8
// ("my data.csv", "données.csv"; no control characters, no '/' or '\\'), not starting with a dot
// (so neither "." nor ".." nor hidden files, nor the ".<name>.part" of a write in progress).
// Otherwise throws ConfigError "file name \"...\": why" (the name shown with non-printable bytes
// escaped). Such a name is safe as a path component; wherever one is logged or shown, it goes
// through printable() (base/printable.h).
std::filesystem::path child_path(const std::filesystem::path& dir, const std::string& name);

// Whether child_path would accept `name`.
bool is_plain_file_name(const std::string& name);

// dir / relative when `relative` is one or more plain file names (as child_path accepts them)
// joined by single '/': "a.csv", "MNIST/raw/train-images-idx3-ubyte". Otherwise throws
// ConfigError naming the path and the component at fault.
std::filesystem::path child_relative_path(const std::filesystem::path& dir,
                                          const std::string& relative);

// Makes `dir`, a directory under `base` (an existing directory), a directory, creating what is
// missing one level at a time. Nothing between `base` and `dir`, `dir` included, may be a symlink
// (`base` and what is above it may): a daemon's subdirectories (datasets/, checkpoints/) are its
// own, and one replaced by a symlink would have it write outside its data directory. Nothing is
// created through one. Throws ConfigError "<path> is a symlink; ..." or "<path> is not a
// directory".
void create_directories_within(const std::filesystem::path& base,
                               const std::filesystem::path& dir);

}  // namespace ravnest::base
