#include "libs/config/job/ravnest_vocabulary.h"

namespace ravnest::config {

const std::vector<RavnestWord>& ravnest_vocabulary() {
  static const std::vector<RavnestWord> words = {
      {"name", "Node", "ravnestd --node node_3 (the daemon serving that node of the plan)"},
      {"model", "Node", "ravnest clusterize MODEL.pt (the TorchScript model it cuts into stages)"},
      {"optimizer", "Node", "[optimizer] name = \"sgd\" | \"adam\" | \"adamw\" | \"rmsprop\" | \"adagrad\" | \"lamb\" (torch_optimizer.Lamb)"},
      {"optimizer_params", "Node", "the keys of [optimizer] (lr, momentum, betas, weight_decay, ...)"},
      {"lr_scheduler", "Node", "[scheduler] name = \"step\" | \"multistep\" | \"exponential\" | \"cosine\" | \"linear_warmup\" | \"warmup_cosine\" | \"warmup_linear\" | \"onecycle\""},
      {"lr_scheduler_params", "Node", "the keys of [scheduler] (step_size, gamma, milestones, t_max, ...)"},
      {"lr_step_on_epoch_change", "Node", "[scheduler] per = \"epoch\" (True) | \"update\" (False)"},
      {"criterion", "Node", "[loss] name = \"cross_entropy\" | \"nll\" | \"mse\" | \"l1\" | \"bce_with_logits\" | \"script\" (with path)"},
      {"labels", "Node", "[data] (the labels come from the dataset: label_column, or the tensors file's second element)"},
      {"test_labels", "Node", "[data] validation (the validation file's labels)"},
      {"device", "Node", "the daemon's machine (CPU LibTorch)"},
      {"reduce_factor", "Node", "[train] reduce_factor (with reduce = \"parameters\")"},
      {"average_optim", "Node", "[train] average_optim"},
      {"compression", "Node", "[compression] activations = \"fp16\", gradients = \"fp16\" (True)"},
      {"update_frequency", "Node", "[train] update_frequency"},
      {"loss_filename", "Node", "the leaf's data dir keeps losses.txt; ravnest status / train print the losses"},
      {"node", "Trainer", "ravnest train JOB.toml (the requester drives every node)"},
      {"train_loader", "Trainer", "[data] format and train"},
      {"val_loader", "Trainer", "[data] validation"},
      {"val_freq", "Trainer", "[train] val_freq"},
      {"save", "Trainer", "[train] save_every, and ravnest fuse --cluster C"},
      {"epochs", "Trainer", "[train] epochs"},
      {"batch_size", "Trainer", "[train] batch_size"},
      {"step_size", "Trainer", "[train] micro_batches (a batch is cut into micro-batches)"},
      {"inputs_dtype", "Trainer", "[data] (the reader decides: float32 features, int64 for tensors files that hold them)"},
  };
  return words;
}

std::optional<std::string> ravnest_equivalent(const std::string& key) {
  for (const auto& w : ravnest_vocabulary()) {
    if (w.word == key) {
      return "Ravnest's " + w.owner + "(" + w.word + "=...) is " + w.equivalent +
             " here (docs/ravnest-vocabulary.md)";
    }
  }
  return std::nullopt;
}

}  // namespace ravnest::config
