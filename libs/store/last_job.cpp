#include "libs/store/last_job.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "libs/base/atomic_file.h"

namespace ravnest::store {

namespace {

const char* outcome_name(LastJob::Outcome outcome) {
  switch (outcome) {
    case LastJob::Outcome::kRunning: return "running";
    case LastJob::Outcome::kFinished: return "finished";
    case LastJob::Outcome::kFailed: return "failed";
    case LastJob::Outcome::kStopped: return "stopped";
  }
  return "running";
}

}  // namespace

void save_last_job(const std::filesystem::path& file, const LastJob& job) {
  nlohmann::json json = {{"job_id", job.job_id},
                         {"outcome", outcome_name(job.outcome)},
                         {"error", job.error}};
  base::write_file_atomically(file.string(), json.dump(2) + "\n");
}

std::optional<LastJob> load_last_job(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  try {
    const auto json = nlohmann::json::parse(base::read_file(file.string()));
    LastJob job;
    job.job_id = json.at("job_id").get<uint64_t>();
    job.error = json.value("error", "");
    const std::string outcome = json.at("outcome").get<std::string>();
    bool known = false;
    for (auto o : {LastJob::Outcome::kRunning, LastJob::Outcome::kFinished,
                   LastJob::Outcome::kFailed, LastJob::Outcome::kStopped}) {
      if (outcome == outcome_name(o)) {
        job.outcome = o;
        known = true;
      }
    }
    if (!known) throw std::runtime_error("unknown outcome \"" + outcome + "\"");
    return job;
  } catch (const std::exception& e) {
    throw std::runtime_error(file.string() + ": unreadable: " + e.what());
  }
}

}  // namespace ravnest::store
