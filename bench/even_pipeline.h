// A plan of one pipeline over `stages` local daemons, cut evenly among the model's allowed
// boundaries, and a job trained on it: what the pipeline benchmarks measure.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "libs/requester/requester.h"

namespace ravnest::bench {

// Writes the plan under `dir` (removed first), starts its daemons (over plain TCP when
// `insecure`), pushes the stages and trains `job_path`; `options` as for Requester::train.
// Returns the result, with `leaf_losses` the leaf's losses.txt and `statuses` each node's status
// after the job (pipeline order) when asked. Every daemon gets `daemon_flags` too (e.g.
// {"--device", "cuda:0"}).
requester::TrainResult train_even_pipeline(const std::filesystem::path& dir,
                                         const std::string& model_path, int stages,
                                         const std::string& job_path, bool insecure = false,
                                         const requester::TrainOptions& options = {},
                                         std::string* leaf_losses = nullptr,
                                         std::vector<wire::NodeStatusData>* statuses = nullptr,
                                         const std::vector<std::string>& daemon_flags = {});

}  // namespace ravnest::bench
