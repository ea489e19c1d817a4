// JobShipment: what `ravnest train` ships to one node, and where the node then finds it. For each
// job path the node reads (config::job_paths_for), every file its reader opens
// (data::dataset_files; a script loss alone) forms a bundle named by a SHA-256 over the files'
// relative names and contents; the daemon keeps it under datasets/<bundle>/, laid out as here.
// Two paths whose files share a base name (s1/d.csv, s2/d.csv) land apart, an MNIST images file
// travels with its labels, and a file of the same name left by an earlier job is never read.
//
// Errors are the readers' one-line errors naming the path, and one naming the job's field and the
// file for a file the daemon could not store under its name (base/safe_path.h: a control
// character, a leading dot).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::requester {

struct ShippedFile {
  std::string name;   // as pushFile takes it: "<bundle>/<relative path>"
  std::string local;  // the file on this machine
  std::string sha256;
  uint64_t size = 0;
};

struct ShippedLocation {
  std::string field;     // "data.train", "data.validation", "loss.path"
  std::string location;  // as loadJob takes it: "<bundle>/<entry>", or "<bundle>" for a directory
};

struct JobShipment {
  std::vector<ShippedFile> files;
  std::vector<ShippedLocation> paths;
};

// The shipment of the node of `metadata`. `sha256_of` caches the checksums of files by local
// path across nodes (several roots get the same data).
JobShipment job_shipment_for(const config::JobSpec& job, const config::NodeMetadata& metadata,
                             std::map<std::string, std::string>& sha256_of);

}  // namespace ravnest::requester
