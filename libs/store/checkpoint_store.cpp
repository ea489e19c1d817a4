#include "libs/store/checkpoint_store.h"

#include <algorithm>
#include <stdexcept>
#include <system_error>

#include "libs/base/atomic_file.h"
#include "libs/base/safe_path.h"
#include "libs/store/checkpoint_names.h"

namespace ravnest::store {

namespace fs = std::filesystem;

namespace {

// The updates of the checkpoint files in `dir`, ascending.
std::vector<uint64_t> list(const fs::path& dir) {
  std::vector<uint64_t> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    uint64_t n = 0;
    if (it->is_regular_file(ec) && parse_checkpoint_file_name(it->path().filename().string(), &n)) {
      found.push_back(n);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

fs::path parent_of(const fs::path& dir) {
  return dir.has_parent_path() ? dir.parent_path() : fs::path(".");
}

void trim_dir(const fs::path& dir, size_t keep) {
  auto all = list(dir);
  std::error_code ec;
  while (all.size() > keep) {
    fs::remove(dir / checkpoint_file_name(all.front()), ec);
    all.erase(all.begin());
  }
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path dir, size_t keep) : dir_(std::move(dir)), keep_(keep) {
  fs::create_directories(parent_of(dir_));
  make_dir(dir_);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const auto extension = it->path().extension();
    if (it->is_regular_file(ec) && (extension == ".tmp" || extension == ".part")) {
      fs::remove(it->path(), ec);
    }
  }
}

void CheckpointStore::make_dir(const fs::path& dir) const {
  // From the store's parent (the data directory): the store's own directory is checked too.
  base::create_directories_within(parent_of(dir_), dir);
}

void CheckpointStore::make_room(const fs::path& file) const {
  make_dir(file.parent_path());
  std::error_code ec;
  const auto status = fs::symlink_status(file, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
    fs::remove_all(file);  // a symlink itself, never what it names
  }
}

void CheckpointStore::check_identity(const std::string& identity) {
  store::check_identity(identity);
}

fs::path CheckpointStore::file(const std::string& identity, uint64_t updates) const {
  return checkpoint_file(dir_, identity, updates);
}

fs::path CheckpointStore::kept_dir(const std::string& identity, int cluster, int position) const {
  return kept_checkpoint_dir(dir_, identity, cluster, position);
}

fs::path CheckpointStore::kept_file(const std::string& identity, int cluster, int position,
                                    uint64_t updates) const {
  return kept_dir(identity, cluster, position) / checkpoint_file_name(updates);
}

std::vector<uint64_t> CheckpointStore::updates(const std::string& identity) const {
  check_identity(identity);
  return list(dir_ / identity);
}

std::vector<uint64_t> CheckpointStore::kept_updates(const std::string& identity, int cluster,
                                                    int position) const {
  return list(kept_dir(identity, cluster, position));
}

void CheckpointStore::trim(const std::string& identity) {
  check_identity(identity);
  trim_dir(dir_ / identity, keep_);
}

void CheckpointStore::trim_kept(const std::string& identity, int cluster, int position) {
  trim_dir(kept_dir(identity, cluster, position), keep_);
}

void CheckpointStore::write(const training::StageCheckpoint& checkpoint) {
  const fs::path target = file(checkpoint.identity, checkpoint.updates);
  make_room(target);
  save_checkpoint(checkpoint, target.string());
  trim(checkpoint.identity);
}

training::StageCheckpoint CheckpointStore::read(const std::string& identity, uint64_t updates, int cluster,
                                      int position) const {
  const fs::path file = this->file(identity, updates);
  if (!fs::is_regular_file(file)) {
    throw std::runtime_error("no checkpoint after update " + std::to_string(updates) +
                             " of this job here");
  }
  training::StageCheckpoint checkpoint = training::load_checkpoint(file.string());
  if (checkpoint.identity != identity || checkpoint.updates != updates ||
      checkpoint.cluster != cluster || checkpoint.position != position) {
    throw std::runtime_error(file.string() + " belongs to another job or stage");
  }
  return checkpoint;
}

void CheckpointStore::mark_finished(const std::string& identity) {
  check_identity(identity);
  fs::create_directories(dir_ / identity);
  base::write_file_atomically((dir_ / identity / "finished").string(), "");
}

bool CheckpointStore::finished(const std::string& identity) const {
  check_identity(identity);
  std::error_code ec;
  return fs::is_regular_file(dir_ / identity / "finished", ec);
}

void CheckpointStore::forget_finished() {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->is_directory(ignored) && !it->is_symlink(ignored)) {
      fs::remove(it->path() / "finished", ignored);
    }
  }
}

std::vector<uint64_t> CheckpointStore::usable(
    const std::vector<uint64_t>& updates,
    const std::function<fs::path(uint64_t)>& file_of, const std::string& identity, int cluster,
    int position) {
  std::vector<uint64_t> out;
  for (uint64_t u : updates) {
    if (training::checkpoint_usable(file_of(u).string(), identity, u, cluster, position)) {
      out.push_back(u);
    }
  }
  return out;
}

std::vector<uint64_t> CheckpointStore::intact(
    const std::vector<uint64_t>& updates,
    const std::function<std::filesystem::path(uint64_t)>& file_of) {
  std::vector<uint64_t> out;
  for (uint64_t u : updates) {
    if (training::checkpoint_intact(file_of(u).string())) out.push_back(u);
  }
  return out;
}

void CheckpointStore::clear(const std::string& identity) {
  check_identity(identity);
  std::error_code ec;
  fs::remove_all(dir_ / identity, ec);
}

}  // namespace ravnest::store
