#include "libs/base/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "libs/base/config_error.h"
#include "libs/base/read_all.h"

namespace ravnest::base {
namespace {

constexpr size_t kMaxSecretBytes = 64 * 1024;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw ConfigError(path + ": secret file " + why);
}

}  // namespace

std::string read_secret(const std::string& path, bool* readable_by_others) {
  if (path.empty()) throw ConfigError("secret_file: empty path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail(path, std::string("cannot be read: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot be read: ") + std::strerror(err));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    fail(path, "is not a regular file");
  }
  if (static_cast<size_t>(info.st_size) > kMaxSecretBytes) {
    ::close(fd);
    fail(path, "is larger than 64 KiB: is this the right file?");
  }
  std::string secret;
  const int err = read_all(fd, &secret, kMaxSecretBytes);
  ::close(fd);
  if (err != 0) fail(path, std::string("cannot be read: ") + std::strerror(err));
  if (secret.size() > kMaxSecretBytes) fail(path, "is larger than 64 KiB: is this the right file?");
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) fail(path, "is empty");
  if (readable_by_others) *readable_by_others = (info.st_mode & (S_IRGRP | S_IROTH)) != 0;
  return secret;
}

bool secrets_equal(std::string_view a, std::string_view b) {
  // Every byte position of the longer string is visited; the loop never exits early.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace ravnest::base
