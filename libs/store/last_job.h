// LastJob: the outcome of a node's last job, kept in its data directory (NodeStore::
// last_job_path) so that it survives a restart of the daemon: `ravnest fuse` refuses the weights
// of a job that did not finish, even after the daemon was restarted. Written atomically at each
// change (temporary file, then rename); a daemon that finds a job still "running" there died
// during it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace ravnest::store {

struct LastJob {
  enum class Outcome { kRunning, kFinished, kFailed, kStopped };
  uint64_t job_id = 0;
  Outcome outcome = Outcome::kRunning;
  std::string error;  // kFailed: why; kStopped: the requester's reason
};

// Throws std::runtime_error naming the file when it cannot be written.
void save_last_job(const std::filesystem::path& file, const LastJob& job);
// Nothing when there is no file; throws std::runtime_error naming the file when it is unreadable.
std::optional<LastJob> load_last_job(const std::filesystem::path& file);

}  // namespace ravnest::store
