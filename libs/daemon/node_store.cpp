#include "libs/daemon/node_store.h"

#include <stdexcept>

#include "libs/config/atomic_file.h"
#include "libs/config/safe_path.h"
#include "libs/config/sha256.h"

namespace ravnest::runtime {

namespace fs = std::filesystem;

NodeStore::NodeStore(fs::path data_dir, std::string node_name)
    : dir_(std::move(data_dir)), node_name_(std::move(node_name)) {
  fs::create_directories(dir_);
  fs::create_directories(dataset_dir());
}

void NodeStore::store_stage(const std::string& metadata_json, const std::string& stage_bytes,
                            const std::string& sha256) {
  const auto metadata = config::node_metadata_from_json(metadata_json, "pushed metadata");
  if (metadata.name != node_name_) {
    throw std::runtime_error("the stage is for " + metadata.name + ", this daemon serves " +
                             node_name_);
  }
  const std::string actual = config::sha256_hex(stage_bytes);
  if (actual != sha256 || actual != metadata.stage_sha256) {
    throw std::runtime_error("stage checksum mismatch: received bytes hash to " + actual +
                             ", expected " + sha256);
  }
  config::write_file_atomically(stage_path().string(), stage_bytes);
  config::write_file_atomically((dir_ / "metadata.json").string(), metadata_json);
  std::error_code ignored;
  fs::remove(trained_path(), ignored);  // a new stage makes the old training result stale
}

bool NodeStore::has_stage() const {
  return fs::exists(dir_ / "metadata.json") && fs::exists(stage_path());
}

config::NodeMetadata NodeStore::metadata() const {
  return config::load_node_metadata((dir_ / "metadata.json").string());
}

fs::path NodeStore::dataset_path(const std::string& name) const {
  return config::child_path(dataset_dir(), name);
}

}  // namespace ravnest::runtime
