#include "libs/store/node_store.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/job/job_files.h"
#include "libs/base/printable.h"
#include "libs/base/safe_path.h"
#include "libs/base/sha256.h"

namespace ravnest::store {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What a write that never finished leaves: wire::FileSink's ".<name>.XXXXXX.part" (hidden, so
// never the name of a shipped file) anywhere; in the data directory itself, whose files are all
// the daemon's own, also base::write_file_atomically's "<name>.tmp.<pid>.<n>" and the
// "<name>.tmp" of older versions.
bool is_partial_file(const std::string& name) {
  return name.front() == '.' && ends_with(name, ".part");
}
bool is_temporary(const std::string& name) {
  return is_partial_file(name) || ends_with(name, ".tmp") ||
         name.find(".tmp.") != std::string::npos;
}

bool is_bundle_name(const std::string& name) {
  if (name.size() != 64) return false;
  for (unsigned char c : name) {
    if (!std::isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

}  // namespace

NodeStore::NodeStore(fs::path data_dir, std::string node_name)
    : dir_(std::move(data_dir)), node_name_(std::move(node_name)), lock_(dir_) {
  // A symlink in their place would have every shipped file or checkpoint written outside the
  // data directory: refused at start, naming it (and again wherever one is written).
  base::create_directories_within(dir_, dataset_dir());
  base::create_directories_within(dir_, checkpoints_dir());
  remove_stale_temporaries();
}

void NodeStore::remove_stale_temporaries() const {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!it->is_directory() && is_temporary(it->path().filename().string())) {
      stale.push_back(it->path());
    }
  }
  // Does not follow symlinks into directories.
  for (auto it = fs::recursive_directory_iterator(dataset_dir(), ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory() && is_partial_file(it->path().filename().string())) {
      stale.push_back(it->path());
    }
  }
  for (const auto& path : stale) {
    std::error_code removed;
    if (fs::remove(path, removed)) {
      spdlog::info("removed {}, left by a write that did not finish", path.string());
    }
  }
}

config::NodeMetadata NodeStore::check_stage_push(
    const std::string& metadata_json, const std::string& sha256,
    const std::function<void(const config::NodeMetadata&)>& accept) const {
  const auto metadata = config::node_metadata_from_json(metadata_json, "pushed metadata");
  if (metadata.name != node_name_) {
    throw std::runtime_error("the stage is for " + base::printable(metadata.name, 40) +
                             ", this daemon serves " + node_name_);
  }
  if (!base::same_sha256(sha256, metadata.stage_sha256)) {
    // The requester hashed the file it sends; its metadata describes another stage.
    throw std::runtime_error("stage checksum mismatch: the stage sent hashes to " +
                             base::printable(sha256, 64) +
                             ", the pushed metadata's stage_sha256 is " +
                             base::printable(metadata.stage_sha256, 64) +
                             ": the plan's stage file and node file do not belong together");
  }
  if (accept) accept(metadata);
  return metadata;
}

void NodeStore::replace_metadata(const std::string& metadata_json,
                                 const std::function<void(const config::NodeMetadata&)>& accept) {
  check_metadata_push(metadata_json, accept);
  base::write_file_atomically((dir_ / "metadata.json").string(), metadata_json);
}

config::NodeMetadata NodeStore::check_metadata_push(
    const std::string& metadata_json,
    const std::function<void(const config::NodeMetadata&)>& accept) const {
  if (!has_stage()) throw std::runtime_error("no stage stored: push the stage");
  const std::string problem = stage_problem();
  if (!problem.empty()) throw std::runtime_error(problem + ": push the stage");
  const std::string stored = metadata().stage_sha256;
  const auto pushed = config::node_metadata_from_json(metadata_json, "pushed metadata");
  if (!base::same_sha256(pushed.stage_sha256, stored)) {
    throw std::runtime_error("the pushed metadata is for stage " +
                             base::printable(pushed.stage_sha256, 64).substr(0, 12) +
                             ", this node stores stage " + stored.substr(0, 12) +
                             ": push the stage");
  }
  return check_stage_push(metadata_json, stored, accept);
}

void NodeStore::commit_stage(const fs::path& received, uint64_t bytes,
                             const std::string& metadata_json) {
  if (::rename(received.c_str(), stage_path().c_str()) != 0) {
    throw std::runtime_error(stage_path().string() + ": cannot write (rename): " +
                             std::strerror(errno));
  }
  base::write_file_atomically((dir_ / "metadata.json").string(), metadata_json);
  base::write_file_atomically(stage_file_path().string(),
                                "{\"bytes\": " + std::to_string(bytes) + "}\n");
  std::error_code ignored;
  fs::remove(trained_path(), ignored);  // a new stage makes the old training result stale
  fs::remove(last_job_path(), ignored);
}

void NodeStore::store_stage(const std::string& metadata_json, const std::string& stage_bytes,
                            const std::string& sha256,
                            const std::function<void(const config::NodeMetadata&)>& accept) {
  const std::string actual = base::sha256_hex(stage_bytes);
  if (!base::same_sha256(actual, sha256)) {
    throw std::runtime_error("stage checksum mismatch: received bytes hash to " + actual +
                             ", expected " + base::printable(sha256, 64));
  }
  check_stage_push(metadata_json, actual, accept);
  // A hidden ".part" file: removed by the next start if this process dies before the rename.
  const fs::path received =
      dir_ / (".stage.pt." + std::to_string(::getpid()) + ".store.part");
  base::write_file_atomically(received.string(), stage_bytes);
  try {
    commit_stage(received, stage_bytes.size(), metadata_json);
  } catch (...) {
    std::error_code ignored;
    fs::remove(received, ignored);
    throw;
  }
}

std::string NodeStore::stage_problem() const {
  if (!has_stage()) return {};
  try {
    (void)metadata();
  } catch (const std::exception& e) {
    return e.what();  // names metadata.json and why
  }
  std::error_code ec;
  const auto size = fs::file_size(stage_path(), ec);
  if (ec) return stage_path().string() + ": cannot read: " + ec.message();
  if (!fs::exists(stage_file_path())) return {};  // pushed by a version that did not record it
  uint64_t pushed = 0;
  try {
    pushed = nlohmann::json::parse(base::read_file(stage_file_path().string()))
                 .at("bytes")
                 .get<uint64_t>();
  } catch (const std::exception& e) {
    return stage_file_path().string() + ": unreadable: " +
           base::printable(e.what(), 200);
  }
  if (size != pushed) {
    return stage_path().string() + ": " + std::to_string(size) + " bytes, pushed with " +
           std::to_string(pushed) + ": truncated or replaced since the push";
  }
  return {};
}

bool NodeStore::has_stage() const {
  return fs::exists(dir_ / "metadata.json") && fs::exists(stage_path());
}

config::NodeMetadata NodeStore::metadata() const {
  return config::load_node_metadata((dir_ / "metadata.json").string());
}

fs::path NodeStore::dataset_path(const std::string& name) const {
  return base::child_path(dataset_dir(), name);
}

std::pair<fs::path, std::string> NodeStore::shipped_file(const std::string& name) const {
  const auto slash = name.find('/');
  if (slash == std::string::npos || !is_bundle_name(name.substr(0, slash))) {
    throw base::ConfigError("shipped file \"" + base::printable(name, 80) +
                              "\": expected <64 hex digits>/<file name>");
  }
  const fs::path path = base::child_relative_path(dataset_dir(), name);
  base::create_directories_within(dir_, path.parent_path());  // through no symlink
  return {path.parent_path(), path.filename().string()};
}

config::JobSpec NodeStore::locate_shipped(const config::JobSpec& job,
                                          const std::map<std::string, std::string>& shipped) const {
  config::JobSpec out = job;
  const std::map<std::string, config::JobPath*> fields = {
      {"data.train", &out.data.train},
      {"data.validation", &out.data.validation},
      {"data.order", &out.data.order},
      {"loss.path", &out.loss.path}};
  // Nothing the requester's machine names is ever opened here: a path this node does not read
  // points nowhere.
  for (const auto& [field, path] : fields) {
    if (!path->empty()) path->resolved = (dataset_dir() / "not-shipped").string();
  }
  for (const auto& wanted : config::job_paths_for(job, metadata())) {
    auto location = shipped.find(wanted.field);
    if (location == shipped.end()) {
      throw std::runtime_error(wanted.field + " (" + base::printable(wanted.path.raw, 80) +
                               ") was not shipped to " +
                               node_name_ + "; run `ravnest train` again");
    }
    const auto slash = location->second.find('/');
    if (!is_bundle_name(location->second.substr(0, slash))) {
      throw base::ConfigError(wanted.field + ": shipped location \"" +
                                base::printable(location->second, 80) + "\" names no bundle");
    }
    const fs::path resolved = base::child_relative_path(dataset_dir(), location->second);
    if (!fs::exists(resolved)) {
      throw std::runtime_error(wanted.field + " (" + base::printable(wanted.path.raw, 80) +
                               "): its files did not "
                               "arrive at " + node_name_ + "; run `ravnest train` again");
    }
    fields.at(wanted.field)->resolved = resolved.string();
  }
  return out;
}

}  // namespace ravnest::store
