#include "libs/config/job/trainer_vocabulary.h"

namespace ravnest::config {

const std::vector<TrainerWord>& trainer_vocabulary() {
  static const std::vector<TrainerWord> words = {
      // DeepSpeed's config (ds_config.json): top-level keys and the optimizer/scheduler blocks.
      {"train_batch_size", "DeepSpeed's",
       "[train] batch_size x update_frequency (one cluster's samples per update; each cluster takes its own batches)"},
      {"train_micro_batch_size_per_gpu", "DeepSpeed's",
       "[train] batch_size / micro_batches (a batch is cut into micro_batches through the pipeline)"},
      {"gradient_accumulation_steps", "DeepSpeed's and HF Trainer's", "[train] update_frequency"},
      {"gradient_clipping", "DeepSpeed's", "[train] grad_clip_norm"},
      {"fp16", "DeepSpeed's and HF Trainer's", "[train] autocast = \"fp16\""},
      {"bf16", "DeepSpeed's and HF Trainer's", "[train] autocast = \"bf16\""},
      {"params", "DeepSpeed's",
       "the keys of the table itself (optimizer.params.lr is [optimizer] lr; scheduler.params.warmup_num_steps "
       "is [scheduler] warmup_steps)"},
      {"type", "DeepSpeed's",
       "name ([optimizer] name = \"adamw\"; [scheduler] WarmupLR is name = \"linear_warmup\", WarmupCosineLR "
       "is name = \"warmup_cosine\", WarmupDecayLR is name = \"warmup_linear\", OneCycle is name = \"onecycle\")"},
      {"warmup_num_steps", "DeepSpeed's", "[scheduler] warmup_steps"},
      {"warmup_min_lr", "DeepSpeed's", "[scheduler] start_factor (warmup_min_lr / warmup_max_lr)"},
      {"warmup_max_lr", "DeepSpeed's", "[optimizer] lr"},
      {"warmup_min_ratio", "DeepSpeed's", "[scheduler] start_factor"},
      {"total_num_steps", "DeepSpeed's",
       "[scheduler] total_steps (warmup_linear, onecycle) or t_max = total_num_steps - warmup_steps (warmup_cosine)"},
      {"cos_min_ratio", "DeepSpeed's", "[scheduler] eta_min (an lr, cos_min_ratio x lr)"},
      {"cycle_max_lr", "DeepSpeed's", "[scheduler] max_lr (name = \"onecycle\")"},
      {"cycle_min_lr", "DeepSpeed's", "[scheduler] div_factor (max_lr / cycle_min_lr, name = \"onecycle\")"},
      {"steps_per_print", "DeepSpeed's", "nothing: every update's loss goes to the metrics files (docs/metrics.md)"},
      {"WarmupLR", "DeepSpeed's", "[scheduler] name = \"linear_warmup\""},
      {"WarmupDecayLR", "DeepSpeed's",
       "[scheduler] name = \"warmup_linear\" (its warmup_type = \"linear\" from warmup_min_lr = 0; the default "
       "\"log\" warm-up has no equivalent)"},
      {"WarmupCosineLR", "DeepSpeed's", "[scheduler] name = \"warmup_cosine\""},
      {"OneCycle", "DeepSpeed's", "[scheduler] name = \"onecycle\""},
      // Hugging Face's TrainingArguments.
      {"num_train_epochs", "HF Trainer's", "[train] epochs"},
      {"learning_rate", "HF Trainer's", "[optimizer] lr"},
      {"per_device_train_batch_size", "HF Trainer's", "[train] batch_size (one cluster's batch)"},
      {"max_grad_norm", "HF Trainer's", "[train] grad_clip_norm"},
      {"warmup_steps", "HF Trainer's",
       "[scheduler] warmup_steps (name = \"warmup_linear\", \"warmup_cosine\" or \"linear_warmup\")"},
      {"warmup_ratio", "HF Trainer's", "[scheduler] warmup_steps (a number of steps, not a ratio)"},
      {"lr_scheduler_type", "HF Trainer's",
       "[scheduler] name (\"linear\" is \"warmup_linear\", \"cosine\" with warm-up is \"warmup_cosine\", "
       "\"constant_with_warmup\" is \"linear_warmup\")"},
      {"linear", "HF Trainer's lr_scheduler_type",
       "[scheduler] name = \"warmup_linear\" (with warmup_steps and total_steps; \"linear_warmup\" is "
       "PyTorch's LinearLR, a warm-up to a constant lr)"},
      // transformers' schedule functions and their arguments.
      {"get_linear_schedule_with_warmup", "transformers'",
       "[scheduler] name = \"warmup_linear\", warmup_steps = num_warmup_steps, total_steps = num_training_steps"},
      {"num_warmup_steps", "transformers'", "[scheduler] warmup_steps"},
      {"num_training_steps", "transformers'", "[scheduler] total_steps (name = \"warmup_linear\")"},
      {"weight_decay", "HF Trainer's", "[optimizer] weight_decay"},
      {"adam_beta1", "HF Trainer's", "[optimizer] betas = [beta1, beta2]"},
      {"adam_beta2", "HF Trainer's", "[optimizer] betas = [beta1, beta2]"},
      {"adam_epsilon", "HF Trainer's", "[optimizer] eps"},
      {"optim", "HF Trainer's", "[optimizer] name"},
      {"eval_steps", "HF Trainer's", "[train] val_freq (in updates)"},
      {"save_steps", "HF Trainer's", "[train] save_every"},
      {"lr", "PyTorch's", "[optimizer] lr"},
      // PyTorch's scheduler classes, as a [scheduler] name.
      {"StepLR", "PyTorch's", "[scheduler] name = \"step\""},
      {"MultiStepLR", "PyTorch's", "[scheduler] name = \"multistep\""},
      {"ExponentialLR", "PyTorch's", "[scheduler] name = \"exponential\""},
      {"CosineAnnealingLR", "PyTorch's", "[scheduler] name = \"cosine\""},
      {"LinearLR", "PyTorch's", "[scheduler] name = \"linear_warmup\""},
      {"SequentialLR", "PyTorch's", "[scheduler] name = \"warmup_cosine\" (LinearLR then CosineAnnealingLR)"},
      {"OneCycleLR", "PyTorch's", "[scheduler] name = \"onecycle\""},
  };
  return words;
}

std::optional<std::string> trainer_equivalent(const std::string& word) {
  for (const auto& w : trainer_vocabulary()) {
    if (w.word == word) {
      return w.owner + " " + w.word + " is " + w.equivalent + " here (docs/job-file.md#other-trainers)";
    }
  }
  return std::nullopt;
}

}  // namespace ravnest::config
