// NodeStore: what a daemon keeps under its data directory. Everything received is written
// atomically (temporary file, then rename), and names from messages go through
// config::child_path, so nothing can land outside the directory.
//
//   stage.pt, metadata.json   the pushed stage and its node metadata (metadata.json last: its
//                             presence means the pair is complete)
//   datasets/<name>           dataset and loss files shipped by the requester
//   trained.pt                the stage as trained by the last job
//   losses.txt                the leaf's losses of the last job, one per batch
//   checkpoints/<identity>/   a job's checkpoints (checkpoint_store.h)
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "libs/config/node_metadata.h"

namespace ravnest::runtime {

class NodeStore {
 public:
  NodeStore(std::filesystem::path data_dir, std::string node_name);

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& node_name() const { return node_name_; }

  // Checks that the metadata is for this node and the bytes match the checksum, then stores both.
  // Throws std::runtime_error with the reason; nothing is stored then.
  void store_stage(const std::string& metadata_json, const std::string& stage_bytes,
                   const std::string& sha256);
  bool has_stage() const;
  config::NodeMetadata metadata() const;
  std::filesystem::path stage_path() const { return dir_ / "stage.pt"; }

  std::filesystem::path dataset_dir() const { return dir_ / "datasets"; }
  std::filesystem::path dataset_path(const std::string& name) const;  // throws on a bad name
  std::filesystem::path trained_path() const { return dir_ / "trained.pt"; }
  std::filesystem::path losses_path() const { return dir_ / "losses.txt"; }
  std::filesystem::path checkpoints_dir() const { return dir_ / "checkpoints"; }

 private:
  std::filesystem::path dir_;
  std::string node_name_;
};

}  // namespace ravnest::runtime
