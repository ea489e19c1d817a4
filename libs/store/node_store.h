// NodeStore: what a daemon keeps under its data directory. Everything received is written
// atomically (temporary file, then rename, which replaces a symlink at the target rather than
// following it), and names from messages go through base::child_path or
// base::child_relative_path, so nothing can land outside the directory. Opening a store
// removes the temporary files a daemon that died mid-write left behind.
//
//   stage.pt, metadata.json   the pushed stage and its node metadata (metadata.json last: its
//                             presence means the pair is complete)
//   stage_file.json           stage.pt's size when it was pushed ({"bytes": N}), which status
//                             checks the file against
//   datasets/<bundle>/...     dataset and loss files shipped by the requester, one directory per
//                             bundle of files named by their content (see schemas: ShippedPath)
//   trained.pt                the stage as trained by the last job
//   losses.txt                the leaf's losses of the last job, one per batch
//   checkpoints/<identity>/   a job's checkpoints (checkpoint_store.h)
//   last_job.json             the last job's outcome (last_job.h), kept across restarts
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/store/data_dir_lock.h"

namespace ravnest::store {

class NodeStore {
 public:
  // Takes the data directory's lock (data_dir_lock.h: throws, one line, when another ravnestd
  // holds it), then removes what unfinished writes left behind.
  NodeStore(std::filesystem::path data_dir, std::string node_name);

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& node_name() const { return node_name_; }

  // A stage push, checked before any byte of the stage travels: the metadata is for this node
  // and names `sha256` as its stage's checksum; then `accept` (which throws to refuse: the
  // daemon's memory budget) takes it. Returns the metadata; throws std::runtime_error with the
  // reason.
  config::NodeMetadata check_stage_push(
      const std::string& metadata_json, const std::string& sha256,
      const std::function<void(const config::NodeMetadata&)>& accept = {}) const;
  // Replaces the stored stage with `received` (a file in dir(), complete and checked: its size
  // `bytes`, its checksum the metadata's), renamed to stage.pt, then writes its metadata and what
  // status checks the file against (stage_file.json: its size). The previous stage's trained.pt
  // and last job's outcome go with it. Throws std::runtime_error naming the file; `received`
  // stays where it was then (the caller removes it).
  void commit_stage(const std::filesystem::path& received, uint64_t bytes,
                    const std::string& metadata_json);
  // New metadata for the stored stage, its bytes unchanged (pushMetadata): checked as a push's
  // (this node, `accept`), and its stage_sha256 must be the stored metadata's; then metadata.json
  // is replaced atomically, nothing else. Throws std::runtime_error with the reason, storing
  // nothing, when no stage is stored, the stored stage has a problem (stage_problem()), or the
  // metadata is for another stage.
  void replace_metadata(const std::string& metadata_json,
                        const std::function<void(const config::NodeMetadata&)>& accept = {});
  // replace_metadata's checks alone: returns the metadata, stores nothing.
  config::NodeMetadata check_metadata_push(
      const std::string& metadata_json,
      const std::function<void(const config::NodeMetadata&)>& accept = {}) const;
  // Both at once for a stage held in memory (in-process clusters, tests, the fuzz target): the
  // bytes must hash to `sha256`, then check_stage_push and commit_stage. Nothing is stored when
  // it throws.
  void store_stage(const std::string& metadata_json, const std::string& stage_bytes,
                   const std::string& sha256,
                   const std::function<void(const config::NodeMetadata&)>& accept = {});
  // Why the stored stage cannot be used as it is, in one line naming the file ("" when nothing
  // is wrong or no stage is stored): metadata.json unreadable, or stage.pt missing or not of the
  // size it was pushed with (truncated, replaced). Cheap (a stat and a small file): a stage of
  // the pushed size but other bytes is found when a job loads it (job_setup.cpp hashes it).
  std::string stage_problem() const;
  bool has_stage() const;
  config::NodeMetadata metadata() const;
  std::filesystem::path stage_path() const { return dir_ / "stage.pt"; }
  std::filesystem::path metadata_path() const { return dir_ / "metadata.json"; }
  std::filesystem::path stage_file_path() const { return dir_ / "stage_file.json"; }

  std::filesystem::path dataset_dir() const { return dir_ / "datasets"; }
  std::filesystem::path dataset_path(const std::string& name) const;  // throws on a bad name
  // A shipped file's name ("<bundle>/<relative path>", schemas: pushFile) as the directory it
  // goes to (created) and its file name there; throws ConfigError on a name that is not one.
  std::pair<std::filesystem::path, std::string> shipped_file(const std::string& name) const;
  // `job` with each path this node reads (config::job_paths_for) where it was shipped:
  // `shipped` maps the job file's key to its location under datasets/ (schemas: ShippedPath).
  // Throws naming the key when one the node reads was not shipped or is not there.
  config::JobSpec locate_shipped(const config::JobSpec& job,
                                 const std::map<std::string, std::string>& shipped) const;

  std::filesystem::path trained_path() const { return dir_ / "trained.pt"; }
  // The leaf's outputs of the last prediction job (stage_predictor.h).
  std::filesystem::path predictions_path() const { return dir_ / "predictions.pt"; }
  std::filesystem::path losses_path() const { return dir_ / "losses.txt"; }
  std::filesystem::path validation_path() const { return dir_ / "validation.txt"; }  // LeafMetrics'
  std::filesystem::path checkpoints_dir() const { return dir_ / "checkpoints"; }
  std::filesystem::path last_job_path() const { return dir_ / "last_job.json"; }

 private:
  void remove_stale_temporaries() const;

  std::filesystem::path dir_;
  std::string node_name_;
  DataDirLock lock_;  // taken before anything in dir_ is touched
};

}  // namespace ravnest::store
