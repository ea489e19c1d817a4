// What the fuzz targets of tests/fuzz share: the input as text, a scratch directory of the
// process, and the check that an error is one line.
//
// A target calls one of the project's parsers or decoders on the fuzzer's input and catches only
// the errors that function documents (ConfigError, WireError, ...): anything else escaping it (a
// std::out_of_range from inside the library, a c10::Error, a crash, a sanitizer report, a hang
// past -timeout, an allocation past -rss_limit_mb) stops the fuzzer as a finding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ravnest::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A directory of this process under $TMPDIR (or /tmp), made on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ravnest-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) std::abort();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// Writes `bytes` to `name` in the scratch directory; returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();
  return path.string();
}

// An error message is one line: what a log or a terminal shows of it cannot be forged by the
// input. A message with a line break stops the fuzzer.
inline void check_one_line(const char* what) {
  for (const char* p = what; *p; ++p) {
    if (*p == '\n' || *p == '\r') {
      std::fprintf(stderr, "error message with a line break: %s\n", what);
      std::abort();
    }
  }
}

}  // namespace ravnest::fuzz
