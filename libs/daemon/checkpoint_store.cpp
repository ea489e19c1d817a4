#include "libs/daemon/checkpoint_store.h"

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace ravnest::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "update_";
constexpr const char* kSuffix = ".pt";

// N of "update_N.pt", or false.
bool parse_name(const std::string& name, uint64_t* updates) {
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

}  // namespace

CheckpointStore::CheckpointStore(fs::path dir, size_t keep) : dir_(std::move(dir)), keep_(keep) {
  fs::create_directories(dir_);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".tmp") fs::remove(it->path(), ec);
  }
}

void CheckpointStore::check_identity(const std::string& identity) {
  const bool hex = std::all_of(identity.begin(), identity.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex || identity.size() < 8 || identity.size() > 64) {
    throw std::runtime_error("a job identity is 8 to 64 lowercase hex characters");
  }
}

fs::path CheckpointStore::path(const std::string& identity, uint64_t updates) const {
  check_identity(identity);
  return dir_ / identity / (kPrefix + std::to_string(updates) + kSuffix);
}

std::vector<uint64_t> CheckpointStore::updates(const std::string& identity) const {
  check_identity(identity);
  std::vector<uint64_t> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_ / identity, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    uint64_t n = 0;
    if (it->is_regular_file(ec) && parse_name(it->path().filename().string(), &n)) {
      found.push_back(n);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

void CheckpointStore::write(const StageCheckpoint& checkpoint) {
  const fs::path target = path(checkpoint.identity, checkpoint.updates);
  fs::create_directories(target.parent_path());
  save_checkpoint(checkpoint, target.string());
  auto all = updates(checkpoint.identity);
  std::error_code ec;
  while (all.size() > keep_) {
    fs::remove(path(checkpoint.identity, all.front()), ec);
    all.erase(all.begin());
  }
}

StageCheckpoint CheckpointStore::read(const std::string& identity, uint64_t updates,
                                      int node_id) const {
  const fs::path file = path(identity, updates);
  if (!fs::is_regular_file(file)) {
    throw std::runtime_error("no checkpoint after update " + std::to_string(updates) +
                             " of this job here");
  }
  StageCheckpoint checkpoint = load_checkpoint(file.string());
  if (checkpoint.identity != identity || checkpoint.updates != updates ||
      checkpoint.node_id != node_id) {
    throw std::runtime_error(file.string() + " belongs to another job or node");
  }
  return checkpoint;
}

void CheckpointStore::clear(const std::string& identity) {
  check_identity(identity);
  std::error_code ec;
  fs::remove_all(dir_ / identity, ec);
}

}  // namespace ravnest::runtime
