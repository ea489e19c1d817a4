#include "libs/store/checkpoint_names.h"

#include <algorithm>
#include <stdexcept>

namespace ravnest::store {

namespace {

constexpr const char* kPrefix = "update_";
constexpr const char* kSuffix = ".pt";

}  // namespace

void check_identity(const std::string& identity) {
  const bool hex = std::all_of(identity.begin(), identity.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex || identity.size() < 8 || identity.size() > 64) {
    throw std::runtime_error("a job identity is 8 to 64 lowercase hex characters");
  }
}

std::string checkpoint_file_name(uint64_t updates) {
  return kPrefix + std::to_string(updates) + kSuffix;
}

bool parse_checkpoint_file_name(const std::string& name, uint64_t* updates) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 19 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *updates = std::stoull(digits);
  return true;
}

std::filesystem::path checkpoint_file(const std::filesystem::path& dir,
                                      const std::string& identity, uint64_t updates) {
  check_identity(identity);
  return dir / identity / checkpoint_file_name(updates);
}

std::filesystem::path kept_checkpoint_dir(const std::filesystem::path& dir,
                                          const std::string& identity, int cluster,
                                          int position) {
  check_identity(identity);
  if (cluster < 0 || position < 0) {
    throw std::runtime_error("a checkpoint slot's cluster and position are not negative");
  }
  return dir / identity / "kept" / (std::to_string(cluster) + "_" + std::to_string(position));
}

}  // namespace ravnest::store
