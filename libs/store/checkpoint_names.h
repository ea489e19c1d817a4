// The names under a node's checkpoints/ directory (checkpoint_store.h), built from values that
// arrive over the wire (a job's identity, a slot, an update count): only these functions turn
// them into paths, so none can name a file outside the directory. No torch.
//
//   <dir>/<identity>/update_<N>.pt                          a node's own checkpoint
//   <dir>/<identity>/kept/<cluster>_<position>/update_<N>.pt  a copy kept for another slot
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ravnest::store {

// Throws std::runtime_error for an identity that is not 8-64 lowercase hex characters.
void check_identity(const std::string& identity);

// "update_<N>.pt"; and N of such a name (false for any other name).
std::string checkpoint_file_name(uint64_t updates);
bool parse_checkpoint_file_name(const std::string& name, uint64_t* updates);

// The paths above; throw std::runtime_error for a bad identity or a negative cluster or position.
std::filesystem::path checkpoint_file(const std::filesystem::path& dir,
                                      const std::string& identity, uint64_t updates);
std::filesystem::path kept_checkpoint_dir(const std::filesystem::path& dir,
                                          const std::string& identity, int cluster, int position);

}  // namespace ravnest::store
