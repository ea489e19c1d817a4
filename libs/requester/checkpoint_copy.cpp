#include "libs/requester/checkpoint_copy.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "libs/training/checkpoint_recut.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

TemporaryCheckpoint::TemporaryCheckpoint(const std::string& plan_dir, const std::string& suffix)
    : path((fs::path(plan_dir) / (".checkpoint." + std::to_string(::getpid()) + suffix + ".pt"))
               .string()) {}

TemporaryCheckpoint::TemporaryCheckpoint(TemporaryCheckpoint&& other) noexcept
    : path(std::move(other.path)) {
  other.path.clear();
}

TemporaryCheckpoint::~TemporaryCheckpoint() {
  if (path.empty()) return;
  std::error_code ignored;
  fs::remove(path, ignored);
}

void copy_checkpoint(Requester& requester, const std::string& plan_dir,
                     const std::string& identity, uint64_t updates, const CheckpointAt& from,
                     const CheckpointAt& to,
                     const std::function<void(const std::string& path)>& adapt) {
  TemporaryCheckpoint copy(plan_dir, "");
  requester.fetch_checkpoint(from.node, identity, from.cluster, from.position, updates, copy.path);
  if (adapt) adapt(copy.path);
  requester.store_checkpoint(to.node, identity, to.cluster, to.position, updates, copy.path);
}

void copy_recut_checkpoints(Requester& requester, const Plan& plan, const std::string& identity,
                            uint64_t updates, int from, int to,
                            const config::OptimizerSpec& optimizer) {
  std::vector<training::CutStage> sources, targets;
  std::vector<TemporaryCheckpoint> files;
  std::vector<std::string> paths;
  for (const auto& m : plan.cluster(from)) {
    sources.push_back({m, (fs::path(plan.dir) / m.stage_file).string()});
    files.emplace_back(plan.dir, "." + std::to_string(m.position));
    requester.fetch_checkpoint(m, identity, m.cluster, m.position, updates, files.back().path);
    paths.push_back(files.back().path);
  }
  const auto nodes = plan.cluster(to);
  for (const auto& m : nodes) targets.push_back({m, (fs::path(plan.dir) / m.stage_file).string()});
  TemporaryCheckpoint out(plan.dir, ".recut");
  training::recut_checkpoints(sources, paths, targets, optimizer,
                              [&](size_t k, const training::StageCheckpoint& checkpoint) {
                                training::save_checkpoint(checkpoint, out.path);
                                const auto& m = nodes[k];
                                requester.store_checkpoint(m, identity, m.cluster, m.position,
                                                           updates, out.path);
                              });
}

}  // namespace ravnest::requester
