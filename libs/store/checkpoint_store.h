// CheckpointStore: a node's checkpoints of its jobs (libs/training/checkpoint.h), under
// <data dir>/checkpoints/<identity>/update_<N>.pt, N the updates done, and the copies it keeps
// for other slots (checkpoint_keeper.h) under <identity>/kept/<cluster>_<position>/. Each file is
// written to a temporary name and renamed, so a listed checkpoint is complete; the newest `keep` of a job
// are kept: a node killed just before writing one still shares an older one with the nodes
// that wrote it and then one more when the job was stopped. Temporary files left by a crash are
// removed when the store opens.
//
// An identity comes from the wire: only lowercase hex of 8 to 64 characters is accepted, so it
// can never name a path outside the store (checkpoint_names.h builds every path).
//
// The store's directory and those under it are real directories: one replaced by a symlink is
// refused when the store opens and wherever a file is written (make_dir).
//
// Thread-safe as far as the file system is: writes happen on the compute thread, listings on the
// RPC thread see complete files only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "libs/training/checkpoint.h"

namespace ravnest::store {

class CheckpointStore {
 public:
  explicit CheckpointStore(std::filesystem::path dir, size_t keep = 3);

  // Throws std::runtime_error for an identity that is not 8-64 lowercase hex characters.
  static void check_identity(const std::string& identity);

  std::vector<uint64_t> updates(const std::string& identity) const;  // ascending
  void write(const training::StageCheckpoint& checkpoint);  // then drops the job's older ones beyond `keep`
  // Throws std::runtime_error naming what is missing or does not match.
  training::StageCheckpoint read(const std::string& identity, uint64_t updates, int cluster,
                       int position) const;
  void clear(const std::string& identity);  // a job that starts afresh: its own and kept copies
  // The job `identity` trained to its end on this node (a marker beside its checkpoints, which a
  // fresh start of the job clears): `ravnest resume` has nothing to continue.
  void mark_finished(const std::string& identity);
  bool finished(const std::string& identity) const;
  // A new stage was pushed: no job has run on it, so no job's `finished` marker holds any longer
  // (its checkpoints stay, for a `ravnest resume`). Best effort: a marker that cannot be removed
  // is left.
  void forget_finished();
  // Of `updates` (ascending, of the files `file_of` names), those whose bytes still match their
  // checksum (checkpoint_intact).
  static std::vector<uint64_t> intact(const std::vector<uint64_t>& updates,
                                      const std::function<std::filesystem::path(uint64_t)>& file_of);
  // Of `updates`, those a resume may load: intact and the checkpoint of job `identity` after
  // that update of slot (`cluster`, `position`) (training::checkpoint_usable; cluster < 0: any
  // slot). Each file is loaded whole, one at a time.
  static std::vector<uint64_t> usable(const std::vector<uint64_t>& updates,
                                      const std::function<std::filesystem::path(uint64_t)>& file_of,
                                      const std::string& identity, int cluster, int position);

  // The file of this node's own checkpoint, or of the copy it keeps for another slot; whether
  // it exists or not. Throws std::runtime_error for a negative cluster or position.
  std::filesystem::path file(const std::string& identity, uint64_t updates) const;
  std::filesystem::path kept_file(const std::string& identity, int cluster, int position,
                                  uint64_t updates) const;
  std::vector<uint64_t> kept_updates(const std::string& identity, int cluster,
                                     int position) const;  // ascending
  // Makes `dir` (the store's directory or one under it, such as a file()'s parent) a directory,
  // through no symlink: throws base::ConfigError naming a symlink in the way, so that a
  // checkpoints/ replaced by one is never written through (base/safe_path.h).
  void make_dir(const std::filesystem::path& dir) const;
  // Readies `file` (a file() or kept_file()) to be renamed into: its directory made (make_dir)
  // and whatever is at its name that is not a regular file removed (a directory named
  // update_N.pt, a dangling symlink), which would fail every write of that update, so every
  // resume that reaches it. Throws what make_dir throws.
  void make_room(const std::filesystem::path& file) const;
  // Drops the oldest files beyond `keep`, once one more was stored (own or kept).
  void trim(const std::string& identity);
  void trim_kept(const std::string& identity, int cluster, int position);

 private:
  std::filesystem::path kept_dir(const std::string& identity, int cluster, int position) const;

  std::filesystem::path dir_;
  size_t keep_;
};

}  // namespace ravnest::store
