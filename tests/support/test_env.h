// What ctest tells every test binary (see tests/CMakeLists.txt), and scratch directories.
#pragma once

#include <filesystem>
#include <string>

namespace ravnest::test {

std::string source_dir();   // RAVNEST_SOURCE_DIR
std::string binary_dir();   // RAVNEST_BINARY_DIR
std::string models_dir();   // RAVNEST_TEST_MODELS
std::string python();       // RAVNEST_PYTHON (/usr/bin/python3)

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a shell command with a time limit (seconds), capturing stdout and stderr.
CommandResult run_command(const std::string& command, int timeout_seconds = 300);

void write_text(const std::filesystem::path& path, const std::string& text);

// sklearn's digits as CSVs and the small CNN (examples/digits/make_data.py), made once per test
// binary in a directory removed at exit: digits_train.csv, digits_val.csv, small_cnn.pt.
const std::filesystem::path& digits_dir();
std::string digits_model();
// examples/hybrid/make_data.py's model (hybrid.pt) and data, made once per test binary likewise.
const std::filesystem::path& hybrid_dir();
std::string read_text(const std::filesystem::path& path);

}  // namespace ravnest::test
