#include "libs/requester/job_identity.h"

#include <filesystem>
#include <stdexcept>

#include "libs/base/atomic_file.h"
#include "libs/base/sha256.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

std::string job_identity(const std::string& job_text, const Plan& plan) {
  std::string what = job_text;
  for (const auto& meta : plan.nodes) {
    // Slots, not node ids: a spare that replaces a node (`ravnest replace`) keeps the identity.
    what += "\n" + std::to_string(meta.cluster) + " " + std::to_string(meta.position) + " " +
            meta.stage_sha256;
  }
  return base::sha256_hex(what).substr(0, 32);
}

std::string last_job_path(const std::string& plan_dir) {
  const std::string file = (fs::path(plan_dir) / "last_job").string();
  if (!fs::exists(file)) {
    throw std::runtime_error("no job was trained with the plan " + plan_dir +
                             " yet: name the job file");
  }
  std::string path = base::read_file(file);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return path;
}

void remember_job(const std::string& plan_dir, const std::string& job_path) {
  try {
    base::write_file_atomically((fs::path(plan_dir) / "last_job").string(),
                                  fs::absolute(job_path).string() + "\n");
  } catch (const std::exception&) {
    // A read-only plan directory: `ravnest resume` then needs the job named.
  }
}

}  // namespace ravnest::requester
