#include "tests/support/test_env.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace ravnest::test {

namespace fs = std::filesystem;

static std::string env_or_throw(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) {
    throw std::runtime_error(std::string(name) + " is not set: run the tests through ctest");
  }
  return value;
}

std::string source_dir() { return env_or_throw("RAVNEST_SOURCE_DIR"); }
std::string binary_dir() { return env_or_throw("RAVNEST_BINARY_DIR"); }
std::string models_dir() { return env_or_throw("RAVNEST_TEST_MODELS"); }
std::string python() { return env_or_throw("RAVNEST_PYTHON"); }

TempDir::TempDir() {
  std::random_device device;
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path candidate = fs::temp_directory_path() /
                         ("ravnest-test-" + std::to_string(::getpid()) + "-" +
                          std::to_string(device() % 1000000));
    if (fs::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

CommandResult run_command(const std::string& command, int timeout_seconds) {
  TempDir scratch;
  const auto out = scratch / "out";
  const auto err = scratch / "err";
  const std::string wrapped = "timeout -k 5 " + std::to_string(timeout_seconds) + " sh -c '" +
                              [&] {
                                std::string quoted;
                                for (char c : command) quoted += c == '\'' ? "'\\''" : std::string(1, c);
                                return quoted;
                              }() +
                              "' >" + out.string() + " 2>" + err.string() + " </dev/null";
  int status = std::system(wrapped.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_text(out);
  result.err = read_text(err);
  return result;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

const fs::path& digits_dir() {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    auto result = run_command(python() + " " + source_dir() + "/examples/digits/make_data.py --out " +
                              dir.path().string());
    if (result.exit_code != 0) {
      throw std::runtime_error("make_data.py failed: " + result.out + result.err);
    }
    made = true;
  }
  return dir.path();
}

std::string digits_model() { return (digits_dir() / "small_cnn.pt").string(); }

const fs::path& hybrid_dir() {
  static TempDir dir;
  static const bool made = [] {
    auto made = run_command(python() + " " + source_dir() + "/examples/hybrid/make_data.py --out " +
                            dir.path().string());
    if (made.exit_code != 0) throw std::runtime_error("make_data.py failed: " + made.err);
    return true;
  }();
  (void)made;
  return dir.path();
}

}  // namespace ravnest::test
