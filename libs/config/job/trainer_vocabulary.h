// Other trainers' key names (DeepSpeed's config, Hugging Face's TrainingArguments, PyTorch's
// scheduler classes) and what to write in this job file instead. The job parser names the
// equivalent when one appears as an unknown key (or a [scheduler] name), as it does for
// Ravnest's words (ravnest_vocabulary.h): "train.gradient_accumulation_steps: unknown key;
// DeepSpeed's and HF Trainer's gradient_accumulation_steps is [train] update_frequency here".
// docs/job-file.md#other-trainers is the same table.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ravnest::config {

struct TrainerWord {
  std::string word;        // the key (or scheduler name) there, e.g. "gradient_clipping"
  std::string owner;       // "DeepSpeed's", "HF Trainer's", "PyTorch's", ...
  std::string equivalent;  // what to write here instead
};

const std::vector<TrainerWord>& trainer_vocabulary();

// The sentence for a key (or scheduler name) that is another trainer's word, or nothing.
std::optional<std::string> trainer_equivalent(const std::string& word);

}  // namespace ravnest::config
