#include "libs/requester/job_shipment.h"

#include <filesystem>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/job/job_files.h"
#include "libs/base/printable.h"
#include "libs/base/safe_path.h"
#include "libs/base/sha256.h"
#include "libs/data/dataset_files.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

namespace {

const std::string& sha256_of_file(const std::string& path,
                                  std::map<std::string, std::string>& cache) {
  auto it = cache.find(path);
  if (it == cache.end()) {
    it = cache.emplace(path, base::sha256_hex(base::read_file(path))).first;
  }
  return it->second;
}

}  // namespace

JobShipment job_shipment_for(const config::JobSpec& job, const config::NodeMetadata& metadata,
                             std::map<std::string, std::string>& sha256_of) {
  JobShipment shipment;
  for (const auto& path : config::job_paths_for(job, metadata)) {
    data::DatasetFiles files;
    if (path.field == "data.train") {
      files = data::dataset_files(job.data, data::Split::kTrain);
    } else if (path.field == "data.validation") {
      files = data::dataset_files(job.data, data::Split::kValidation);
    } else {
      const fs::path file = fs::path(path.path.resolved).lexically_normal();
      files.root = file.parent_path();
      files.entry = file.filename().string();
      files.files = {files.entry};
    }
    // The bundle's name: its files' relative names and contents.
    std::string listing;
    std::vector<ShippedFile> bundle;
    for (const auto& relative : files.files) {
      ShippedFile file;
      file.local = (files.root / relative).string();
      // The daemon takes only names it can store (base/safe_path.h); refused here, before
      // anything ships, rather than by the node mid-ship.
      try {
        base::child_relative_path(fs::path(), relative);
      } catch (const base::ConfigError& e) {
        throw base::ConfigError(path.field + ": " + base::printable(file.local, 200) +
                                  " cannot be shipped: " + e.what());
      }

      file.sha256 = sha256_of_file(file.local, sha256_of);
      file.size = fs::file_size(file.local);
      listing += relative + '\n' + file.sha256 + '\n';
      file.name = relative;  // prefixed with the bundle below
      bundle.push_back(std::move(file));
    }
    const std::string id = base::sha256_hex(listing);
    for (auto& file : bundle) {
      file.name = id + "/" + file.name;
      shipment.files.push_back(std::move(file));
    }
    shipment.paths.push_back({path.field, files.entry.empty() ? id : id + "/" + files.entry});
  }
  return shipment;
}

}  // namespace ravnest::requester
