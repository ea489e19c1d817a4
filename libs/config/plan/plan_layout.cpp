#include "libs/config/plan/plan_layout.h"

#include <filesystem>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNodePrefix = "node_";  // node_name()'s, to recognise its files

}  // namespace

std::string PlanLayout::plan_file() const { return (fs::path(dir_) / kPlanFile).string(); }

std::string PlanLayout::nodes_dir() const { return (fs::path(dir_) / kNodesDir).string(); }

std::string PlanLayout::stages_dir() const { return (fs::path(dir_) / kStagesDir).string(); }

std::string PlanLayout::node_file(int node_id) const {
  return (fs::path(dir_) / kNodesDir / (node_name(node_id) + ".json")).string();
}

std::string PlanLayout::resolve(const std::string& relative) const {
  return (fs::path(dir_) / relative).string();
}

std::string PlanLayout::stage_file(int node_id) {
  return std::string(kStagesDir) + "/" + node_name(node_id) + ".pt";
}

bool PlanLayout::is_node_file(const std::string& filename) {
  const fs::path name(filename);
  return filename.rfind(kNodePrefix, 0) == 0 && name.extension() == ".json";
}

}  // namespace ravnest::config
