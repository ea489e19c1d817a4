// Ravnest's vocabulary: the arguments of Ravnest's Node(...) and Trainer(...) (Python) and
// where each lives here (a job-file key, a command, or nothing because the design differs).
// The job parser names the equivalent when a Ravnest word appears where it does not belong
// ("train.lr_step_on_epoch_change: Ravnest's Node(lr_step_on_epoch_change=...) is
// [scheduler] per = "epoch" | "update" here"); docs/ravnest-vocabulary.md is the same table.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ravnest::config {

struct RavnestWord {
  std::string word;        // the argument's name in Ravnest, e.g. "lr_step_on_epoch_change"
  std::string owner;       // "Node" or "Trainer"
  std::string equivalent;  // what to write here instead
};

const std::vector<RavnestWord>& ravnest_vocabulary();

// The sentence for a job-file key that is one of Ravnest's words (and not a key of this job
// file table), or nothing.
std::optional<std::string> ravnest_equivalent(const std::string& key);

}  // namespace ravnest::config
