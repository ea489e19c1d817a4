// A job's identity and the plan's memory of its last job.
//
// The identity is a hash of the job file's text and of the plan's stages (their slots and
// checksums): a checkpoint is resumed only by the job that wrote it (docs/faults.md). Every train
// remembers its job file in the plan directory, for `ravnest resume` without one.
#pragma once

#include <string>

#include "libs/requester/requester.h"

namespace ravnest::requester {

std::string job_identity(const std::string& job_text, const Plan& plan);  // 32 lowercase hex
void remember_job(const std::string& plan_dir, const std::string& job_path);  // best effort
std::string last_job_path(const std::string& plan_dir);  // throws when no job was trained yet

}  // namespace ravnest::requester
