#include "libs/requester/checkpoint_copy.h"

#include <unistd.h>

#include <filesystem>

namespace ravnest::requester {

void copy_checkpoint(Requester& requester, const std::string& plan_dir,
                     const std::string& identity, uint64_t updates, const CheckpointAt& from,
                     const CheckpointAt& to,
                     const std::function<void(const std::string& path)>& adapt) {
  namespace fs = std::filesystem;
  // The plan directory: the requester may write there (`ravnest replace` moves one the same way).
  struct Removed {
    std::string path;
    ~Removed() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } copy{(fs::path(plan_dir) / (".checkpoint." + std::to_string(::getpid()) + ".pt")).string()};
  requester.fetch_checkpoint(from.node, identity, from.cluster, from.position, updates, copy.path);
  if (adapt) adapt(copy.path);
  requester.store_checkpoint(to.node, identity, to.cluster, to.position, updates, copy.path);
}

}  // namespace ravnest::requester
