// Job files (libs/config/job/job_spec.h): every field read, every default, every error one line
// naming the file and the field.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "libs/base/config_error.h"
#include "libs/config/job/job_files.h"
#include "libs/config/job/job_plan_check.h"
#include "libs/config/job/job_spec.h"
#include "libs/config/job/prediction_job.h"

using namespace ravnest::config;
using namespace ravnest::base;

namespace {

const std::string kMinimal = R"(
[data]
format = "csv"
train = "train.csv"
[loss]
name = "cross_entropy"
[optimizer]
name = "adam"
)";

std::string error_of(const std::string& text, const std::string& origin = "job.toml") {
  try {
    parse_job(text, origin);
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.rfind(origin + ": ", 0) == 0);
    return message;
  }
  FAIL("expected a ConfigError for:\n" << text);
  return "";
}

// kMinimal with `extra` lines appended to table `table` (added as a new table if absent).
std::string with(const std::string& table, const std::string& extra) {
  std::string text = kMinimal;
  const std::string header = "[" + table + "]\n";
  const auto at = text.find(header);
  if (at == std::string::npos) return text + header + extra + "\n";
  text.insert(at + header.size(), extra + "\n");
  return text;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a minimal job gets the documented defaults") {
  const JobSpec job = parse_job(kMinimal, "/jobs/job.toml");
  CHECK(job.origin == "/jobs/job.toml");
  CHECK(job.base_dir == "/jobs");
  CHECK(job.train.epochs == 1);
  CHECK(job.train.batch_size == 64);
  CHECK(job.train.micro_batches == 1);
  CHECK(job.train.update_frequency == 1);
  CHECK(job.train.seed == 0);
  CHECK(job.train.shuffle);
  CHECK_FALSE(job.train.max_steps);
  CHECK(job.train.val_freq == 0);
  CHECK(job.train.schedule == PipelineSchedule::kGPipe);
  CHECK(job.train.max_in_flight == 0);
  CHECK(job.train.save_every == 100);
  CHECK_FALSE(job.train.drop_last);
  CHECK(job.data.format == DataFormat::kCsv);
  CHECK(job.data.train.raw == "train.csv");
  CHECK(job.data.train.resolved == "/jobs/train.csv");
  CHECK(job.data.validation.empty());
  CHECK(job.data.label_column == "label");
  CHECK(job.data.header);
  CHECK(job.data.input_shape.empty());
  CHECK(job.data.scale == 1.0);
  CHECK_FALSE(job.data.num_classes);
  CHECK(job.loss.name == LossName::kCrossEntropy);
  CHECK(job.loss.reduction == "mean");
  CHECK(job.loss.ignore_index == -100);  // PyTorch's default
  CHECK(job.loss.class_dim == 0);        // the rule (docs/job-file.md [loss])
  {
    const JobSpec lm = parse_job(with("loss", "ignore_index = 0\nclass_dim = -1"), "job.toml");
    CHECK(lm.loss.ignore_index == 0);
    CHECK(lm.loss.class_dim == -1);
  }
  CHECK(job.optimizer.name == OptimizerName::kAdam);
  CHECK(job.optimizer.lr == 1e-3);
  CHECK(job.optimizer.betas == std::make_pair(0.9, 0.999));
  CHECK(job.optimizer.eps == 1e-8);
  CHECK(job.optimizer.weight_decay == 0);
  CHECK_FALSE(job.optimizer.amsgrad);
  CHECK_FALSE(job.scheduler);
}

TEST_CASE("every field of a full job is read") {
  const JobSpec job = parse_job(R"(
[train]
epochs = 15
batch_size = 32
micro_batches = 4
update_frequency = 2
seed = 42
shuffle = false
max_steps = 100
val_freq = 5
schedule = "1f1b"
save_every = 10
drop_last = true

[data]
format = "csv"
train = "data/train.csv.gz"
validation = "/abs/val.csv"
label_column = "digit"
header = true
input_shape = [1, 8, 8]
scale = 0.0625
num_classes = 10

[loss]
name = "cross_entropy"
reduction = "mean"

[optimizer]
name = "sgd"
lr = 0.1
momentum = 0.9
dampening = 0.0
nesterov = true
weight_decay = 5e-4

[scheduler]
name = "multistep"
milestones = [3, 7]
gamma = 0.5
per = "update"
)", "/home/u/jobs/../jobs/job.toml");
  CHECK(job.base_dir == "/home/u/jobs");
  CHECK(job.train.epochs == 15);
  CHECK(job.train.batch_size == 32);
  CHECK(job.train.micro_batches == 4);
  CHECK(job.train.update_frequency == 2);
  CHECK(job.train.seed == 42);
  CHECK_FALSE(job.train.shuffle);
  CHECK(job.train.max_steps == 100);
  CHECK(job.train.val_freq == 5);
  CHECK(job.train.schedule == PipelineSchedule::k1F1B);
  CHECK(job.train.save_every == 10);
  CHECK(job.train.drop_last);
  CHECK(job.data.train.raw == "data/train.csv.gz");
  CHECK(job.data.train.resolved == "/home/u/jobs/data/train.csv.gz");
  CHECK(job.data.validation.raw == "/abs/val.csv");
  CHECK(job.data.validation.resolved == "/abs/val.csv");
  CHECK(job.data.label_column == "digit");
  CHECK(job.data.input_shape == std::vector<int64_t>{1, 8, 8});
  CHECK(job.data.scale == 0.0625);
  CHECK(job.data.num_classes == 10);
  CHECK(job.optimizer.name == OptimizerName::kSgd);
  CHECK(job.optimizer.lr == 0.1);
  CHECK(job.optimizer.momentum == 0.9);
  CHECK(job.optimizer.dampening == 0.0);
  CHECK(job.optimizer.nesterov);
  CHECK(job.optimizer.weight_decay == 5e-4);
  REQUIRE(job.scheduler);
  CHECK(job.scheduler->name == SchedulerName::kMultiStep);
  CHECK(job.scheduler->milestones == std::vector<int64_t>{3, 7});
  CHECK(job.scheduler->gamma == 0.5);
  CHECK(job.scheduler->per == SchedulerPer::kUpdate);
}

TEST_CASE("data formats and their fields") {
  SECTION("csv without header takes a column index, default the last") {
    auto job = parse_job(with("data", "header = false"), "job.toml");
    CHECK(job.data.label_column.empty());
    CHECK(job.data.label_index == -1);
    job = parse_job(with("data", "header = false\nlabel_column = 0"), "job.toml");
    CHECK(job.data.label_index == 0);
  }
  SECTION("mnist, cifar10, tensors") {
    for (const auto& [name, format] : std::vector<std::pair<std::string, DataFormat>>{
             {"mnist", DataFormat::kMnist}, {"cifar10", DataFormat::kCifar10}, {"tensors", DataFormat::kTensors}}) {
      const auto job = parse_job("[data]\nformat = \"" + name + "\"\ntrain = \"d\"\nnum_classes = 10\n"
                                 "[loss]\nname = \"nll\"\n[optimizer]\nname = \"sgd\"\nlr = 1\n", "j.toml");
      CHECK(job.data.format == format);
      CHECK(job.data.num_classes == 10);
      CHECK(job.optimizer.lr == 1.0);  // an integer is a number
      CHECK(to_string(job.data.format) == name);
    }
  }
  SECTION("relative paths resolve against the job file's directory") {
    const auto job = parse_job(kMinimal, "sub/dir/job.toml");
    const auto expected = (std::filesystem::current_path() / "sub/dir/train.csv").lexically_normal();
    CHECK(job.data.train.resolved == expected.string());
  }
}

TEST_CASE("losses") {
  for (const auto& [name, value] : std::vector<std::pair<std::string, LossName>>{
           {"cross_entropy", LossName::kCrossEntropy}, {"nll", LossName::kNll}, {"mse", LossName::kMse},
           {"l1", LossName::kL1}, {"bce_with_logits", LossName::kBceWithLogits}}) {
    std::string text = kMinimal;
    text.replace(text.find("cross_entropy"), 13, name);
    CHECK(parse_job(text, "j.toml").loss.name == value);
  }
  std::string text = kMinimal;
  text.replace(text.find("\"cross_entropy\""), 15, "\"script\"\npath = \"my_loss.pt\"");
  const auto job = parse_job(text, "/j/job.toml");
  CHECK(job.loss.name == LossName::kScript);
  CHECK(job.loss.path.raw == "my_loss.pt");
  CHECK(job.loss.path.resolved == "/j/my_loss.pt");
}

TEST_CASE("optimizers get PyTorch's defaults and their own options") {
  auto opt = [](const std::string& body) {
    std::string text = kMinimal;
    text.replace(text.find("name = \"adam\""), 13, body);
    return parse_job(text, "j.toml").optimizer;
  };
  auto o = opt("name = \"adamw\"\nbetas = [0.8, 0.99]\neps = 1e-6\namsgrad = true");
  CHECK(o.name == OptimizerName::kAdamW);
  CHECK(o.lr == 1e-3);
  CHECK(o.weight_decay == 1e-2);
  CHECK(o.betas == std::make_pair(0.8, 0.99));
  CHECK(o.eps == 1e-6);
  CHECK(o.amsgrad);
  o = opt("name = \"rmsprop\"\nalpha = 0.9\nmomentum = 0.5\ncentered = true\nweight_decay = 0.1");
  CHECK(o.name == OptimizerName::kRmsprop);
  CHECK(o.lr == 1e-2);
  CHECK(o.alpha == 0.9);
  CHECK(o.momentum == 0.5);
  CHECK(o.centered);
  CHECK(o.eps == 1e-8);
  CHECK(o.weight_decay == 0.1);
  o = opt("name = \"adagrad\"\nlr_decay = 0.01\ninitial_accumulator_value = 0.1");
  CHECK(o.name == OptimizerName::kAdagrad);
  CHECK(o.lr == 1e-2);
  CHECK(o.lr_decay == 0.01);
  CHECK(o.initial_accumulator_value == 0.1);
  CHECK(o.eps == 1e-10);
  // torch_optimizer.Lamb's defaults, and Ravnest's BERT example's options.
  o = opt("name = \"lamb\"");
  CHECK(o.name == OptimizerName::kLamb);
  CHECK(o.lr == 1e-3);
  CHECK(o.betas == std::make_pair(0.9, 0.999));
  CHECK(o.eps == 1e-6);
  CHECK(o.weight_decay == 0);
  CHECK(o.clamp_value == 10);
  CHECK_FALSE(o.adam);
  CHECK_FALSE(o.debias);
  o = opt("name = \"lamb\"\nlr = 0.00176\neps = 1e-6\ndebias = true\nweight_decay = 0.01\n"
          "clamp_value = 10000.0\nadam = true\nbetas = [0.8, 0.99]");
  CHECK(o.lr == 0.00176);
  CHECK(o.debias);
  CHECK(o.adam);
  CHECK(o.weight_decay == 0.01);
  CHECK(o.clamp_value == 10000.0);
  CHECK(o.betas == std::make_pair(0.8, 0.99));
  o = opt("name = \"sgd\"\nlr = 0.5");
  CHECK(o.momentum == 0);
  CHECK(o.dampening == 0);
  CHECK_FALSE(o.nesterov);
}

TEST_CASE("schedulers and their defaults") {
  auto sched = [](const std::string& body) { return *parse_job(with("scheduler", body), "j.toml").scheduler; };
  auto s = sched("name = \"step\"\nstep_size = 3");
  CHECK(s.name == SchedulerName::kStep);
  CHECK(s.step_size == 3);
  CHECK(s.gamma == 0.1);
  CHECK(s.per == SchedulerPer::kEpoch);
  s = sched("name = \"exponential\"\ngamma = 0.9\nper = \"update\"");
  CHECK(s.name == SchedulerName::kExponential);
  CHECK(s.gamma == 0.9);
  CHECK(s.per == SchedulerPer::kUpdate);
  s = sched("name = \"cosine\"\nt_max = 50\neta_min = 1e-5");
  CHECK(s.name == SchedulerName::kCosine);
  CHECK(s.t_max == 50);
  CHECK(s.eta_min == 1e-5);
  s = sched("name = \"cosine\"\nt_max = 5");
  CHECK(s.eta_min == 0);
  s = sched("name = \"linear_warmup\"\nwarmup_steps = 100");
  CHECK(s.name == SchedulerName::kLinearWarmup);
  CHECK(s.warmup_steps == 100);
  CHECK(s.start_factor == Approx(1.0 / 3));
  s = sched("name = \"linear_warmup\"\nwarmup_steps = 10\nstart_factor = 0.1");
  CHECK(s.start_factor == 0.1);
  s = sched("name = \"warmup_cosine\"\nwarmup_steps = 10\nt_max = 90\neta_min = 1e-4");
  CHECK(s.name == SchedulerName::kWarmupCosine);
  CHECK(s.warmup_steps == 10);
  CHECK(s.t_max == 90);
  CHECK(s.eta_min == 1e-4);
  CHECK(s.start_factor == Approx(1.0 / 3));
  s = sched("name = \"warmup_linear\"\nwarmup_steps = 0\ntotal_steps = 40\nper = \"update\"");
  CHECK(s.name == SchedulerName::kWarmupLinear);
  CHECK(s.warmup_steps == 0);
  CHECK(s.total_steps == 40);
  // OneCycleLR's defaults.
  s = sched("name = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 100");
  CHECK(s.name == SchedulerName::kOneCycle);
  CHECK(s.max_lr == 0.1);
  CHECK(s.total_steps == 100);
  CHECK(s.pct_start == 0.3);
  CHECK(s.anneal_strategy == AnnealStrategy::kCos);
  CHECK(s.div_factor == 25);
  CHECK(s.final_div_factor == 1e4);
  CHECK_FALSE(s.three_phase);
  CHECK(s.cycle_momentum);
  CHECK(s.base_momentum == 0.85);
  CHECK(s.max_momentum == 0.95);
  s = sched("name = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 100\nanneal_strategy = \"linear\"\n"
            "three_phase = true\ncycle_momentum = false");
  CHECK(s.anneal_strategy == AnnealStrategy::kLinear);
  CHECK(s.three_phase);
  CHECK_FALSE(s.cycle_momentum);
}

TEST_CASE("every error names the file and the field") {
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"[data\n", "job.toml: malformed TOML at line 1"},
      {"epoch = 3\n" + kMinimal, "job.toml: epoch: unknown key (the tables are"},
      // Ravnest's words, where a Ravnest user would put them: the equivalent, not the list.
      {"epochs = 3\n" + kMinimal,
       "job.toml: epochs: unknown key; Ravnest's Trainer(epochs=...) is [train] epochs here "
       "(docs/ravnest-vocabulary.md)"},
      {with("train", "lr_step_on_epoch_change = true"),
       "job.toml: train.lr_step_on_epoch_change: unknown key; Ravnest's "
       "Node(lr_step_on_epoch_change=...) is [scheduler] per = \"epoch\" (True) | \"update\" "
       "(False) here"},
      {with("optimizer", "optimizer_params = 1"),
       "job.toml: optimizer.optimizer_params: unknown key; Ravnest's Node(optimizer_params=...) is "
       "the keys of [optimizer]"},
      {with("data", "batch_size = 64"),
       "job.toml: data.batch_size: unknown key; Ravnest's Trainer(batch_size=...) is [train] "
       "batch_size here"},
      {"[lr_scheduler]\nname = \"step\"\n" + kMinimal,
       "job.toml: lr_scheduler: unknown table; Ravnest's Node(lr_scheduler=...) is [scheduler] name"},
      {kMinimal + "[trian]\nepochs = 3\n", "job.toml: trian: unknown table; did you mean [train]? (the tables are"},
      {"train = 3\n" + kMinimal, "job.toml: train: must be a table [train], got an integer"},
      {"[loss]\nname = \"nll\"\n[optimizer]\nname = \"adam\"\n", "job.toml: data: missing table [data]"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[optimizer]\nname = \"adam\"\n", "job.toml: loss: missing table [loss]"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n", "job.toml: optimizer: missing table [optimizer]"},
      // [train]
      {with("train", "epoch = 3"), "job.toml: train.epoch: unknown key; did you mean 'epochs'? (epochs, batch_size,"},
      {with("train", "epochs = 0"), "job.toml: train.epochs: must be >= 1, got 0"},
      {with("train", "epochs = \"3\""), "job.toml: train.epochs: must be an integer, got a string"},
      {with("train", "batch_size = 2.5"), "job.toml: train.batch_size: must be an integer, got a float"},
      {with("train", "batch_size = 0"), "job.toml: train.batch_size: must be in [1, 2147483647], got 0"},
      {with("train", "batch_size = 9223372036854775807"),
       "job.toml: train.batch_size: must be in [1, 2147483647], got 9223372036854775807"},
      {with("train", "micro_batches = 0"), "job.toml: train.micro_batches: must be in [1, 2147483647], got 0"},
      {with("train", "batch_size = 4\nmicro_batches = 5"), "job.toml: train.micro_batches: must be <= batch_size (4), got 5"},
      {with("train", "update_frequency = 0"), "job.toml: train.update_frequency: must be in [1,"},
      {with("train", "seed = -1"), "job.toml: train.seed: must be >= 0, got -1"},
      {with("train", "shuffle = 1"), "job.toml: train.shuffle: must be true or false, got an integer"},
      {with("train", "max_steps = 0"), "job.toml: train.max_steps: must be >= 1, got 0"},
      {with("train", "val_freq = -1"), "job.toml: train.val_freq: must be >= 0, got -1"},
      {with("train", "schedule = \"pipedream\""), "job.toml: train.schedule: unknown schedule 'pipedream' (gpipe, 1f1b, async)"},
      {with("train", "schedule = \"async\"\nmax_in_flight = 0"), "job.toml: train.max_in_flight: must be in [1, 2147483647], got 0"},
      {with("train", "schedule = \"async\"\nmax_in_flight = -3"), "job.toml: train.max_in_flight: must be in [1, 2147483647], got -3"},
      {with("train", "max_in_flight = 2"), "job.toml: train.max_in_flight: only with schedule = \"async\" (gpipe and 1f1b decide it themselves)"},
      {with("train", "schedule = \"1f1b\"\nmax_in_flight = 2"), "job.toml: train.max_in_flight: only with schedule = \"async\""},
      {with("train", "save_every = -2"), "job.toml: train.save_every: must be >= 0, got -2"},
      {with("train", "drop_last = \"yes\""), "job.toml: train.drop_last: must be true or false, got a string"},
      // [data]
      {"[data]\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adam\"\n", "job.toml: data.format: missing (csv, mnist, cifar10, tensors)"},
      {"[data]\nformat = \"csv\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adam\"\n", "job.toml: data.train: missing"},
      {"[data]\nformat = \"parquet\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adam\"\n",
       "job.toml: data.format: unknown data format 'parquet' (csv, mnist, cifar10, tensors)"},
      {with("data", "validation = \"\""), "job.toml: data.validation: must not be empty"},
      {with("data", "valdation = \"v.csv\""), "job.toml: data.valdation: unknown key; did you mean 'validation'? ("},
      {with("data", "input_shape = [1, 0, 8]"), "job.toml: data.input_shape: must hold positive integers"},
      {with("data", "input_shape = []"), "job.toml: data.input_shape: must not be empty"},
      {with("data", "input_shape = 64"), "job.toml: data.input_shape: must be an array, got an integer"},
      {with("data", "scale = \"1/16\""), "job.toml: data.scale: must be a number, got a string"},
      {with("data", "scale = nan"), "job.toml: data.scale: must be a finite number"},
      {with("data", "num_classes = 0"), "job.toml: data.num_classes: must be >= 1, got 0"},
      {with("data", "header = false\nlabel_column = \"label\""), "job.toml: data.label_column: a column name needs header = true"},
      {with("data", "label_column = 1.5"), "job.toml: data.label_column: must be a column name or a 0-based index, got a float"},
      {"[data]\nformat = \"mnist\"\ntrain = \"d\"\nscale = 0.5\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adam\"\n",
       "job.toml: data.scale: only for format = \"csv\" (this job has \"mnist\")"},
      // [loss]
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nreduction = \"mean\"\n[optimizer]\nname = \"adam\"\n", "job.toml: loss.name: missing"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"hinge\"\n[optimizer]\nname = \"adam\"\n",
       "job.toml: loss.name: unknown loss 'hinge' (cross_entropy, nll, mse, l1, bce_with_logits, script)"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"script\"\n[optimizer]\nname = \"adam\"\n", "job.toml: loss.path: missing"},
      {with("loss", "path = \"l.pt\""), "job.toml: loss.path: only for name = \"script\""},
      {with("loss", "reduction = \"sum\""), "job.toml: loss.reduction: only \"mean\" is supported"},
      {with("loss", "weight = 1"), "job.toml: loss.weight: unknown key (name, path, reduction, ignore_index, class_dim)"},
      {with("loss", "ignore_index = 1.5"), "job.toml: loss.ignore_index: must be an integer, got a float"},
      {with("loss", "class_dim = 0"), "job.toml: loss.class_dim: must be 1 (PyTorch's [N, C, ...]) or -1"},
      {with("loss", "class_dim = 2"), "job.toml: loss.class_dim: "},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"mse\"\nignore_index = 0\n[optimizer]\nname = \"adam\"\n",
       "job.toml: loss.ignore_index: only for name = \"cross_entropy\" or \"nll\""},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"l1\"\nclass_dim = -1\n[optimizer]\nname = \"adam\"\n",
       "job.toml: loss.class_dim: only for name = \"cross_entropy\" or \"nll\""},
      // [optimizer]
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adamw2\"\n",
       "job.toml: optimizer.name: unknown optimizer 'adamw2'; did you mean 'adamw'? (sgd, adam, adamw, rmsprop, adagrad, lamb)"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nlr = 0.1\n", "job.toml: optimizer.name: missing"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"sgd\"\n",
       "job.toml: optimizer.lr: missing: sgd has no default learning rate"},
      {with("optimizer", "momentum = 0.9"), "job.toml: optimizer.momentum: not an option of adam (name, lr, betas, eps, weight_decay, amsgrad)"},
      {with("optimizer", "learning_rate = 0.1"), "job.toml: optimizer.learning_rate: unknown key"},
      {with("optimizer", "lr = -0.1"), "job.toml: optimizer.lr: must be >= 0, got -0.10000000000000001"},
      {with("optimizer", "lr = inf"), "job.toml: optimizer.lr: must be a finite number, got inf"},
      {with("optimizer", "betas = [0.9]"), "job.toml: optimizer.betas: must be two numbers"},
      {with("optimizer", "betas = [0.9, 1.0]"), "job.toml: optimizer.betas: each must be in [0, 1), got [0.90000000000000002, 1]"},
      {with("optimizer", "betas = [0.9, \"x\"]"), "job.toml: optimizer.betas: must be a number, got a string"},
      {with("optimizer", "eps = -1"), "job.toml: optimizer.eps: must be >= 0, got -1"},
      {with("optimizer", "amsgrad = 0"), "job.toml: optimizer.amsgrad: must be true or false, got an integer"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"sgd\"\nlr = 0.1\nnesterov = true\n",
       "job.toml: optimizer.nesterov: needs momentum > 0 and dampening = 0"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"sgd\"\nlr = 0.1\nbetas = [0.9, 0.9]\n",
       "job.toml: optimizer.betas: not an option of sgd (name, lr, momentum, dampening, nesterov, weight_decay)"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"rmsprop\"\namsgrad = true\n",
       "job.toml: optimizer.amsgrad: not an option of rmsprop"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adagrad\"\nmomentum = 0.1\n",
       "job.toml: optimizer.momentum: not an option of adagrad"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"lamb\"\namsgrad = true\n",
       "job.toml: optimizer.amsgrad: not an option of lamb (name, lr, betas, eps, weight_decay, clamp_value, adam, debias)"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"lamb\"\nlr = 0\n",
       "job.toml: optimizer.lr: must be > 0, got 0"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"lamb\"\nclamp_value = -1\n",
       "job.toml: optimizer.clamp_value: must be >= 0, got -1"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"lamb\"\ndebias = 1\n",
       "job.toml: optimizer.debias: must be true or false, got an integer"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"lamb\"\nweight_decay = -0.01\n",
       "job.toml: optimizer.weight_decay: must be >= 0"},
      {with("optimizer", "clamp_value = 10.0"),
       "job.toml: optimizer.clamp_value: not an option of adam (name, lr, betas, eps, weight_decay, amsgrad)"},
      // [scheduler]
      {with("scheduler", "step_size = 3"), "job.toml: scheduler.name: missing (step, multistep, exponential, cosine, linear_warmup, warmup_cosine, warmup_linear, onecycle)"},
      {with("scheduler", "name = \"plateau\""), "job.toml: scheduler.name: unknown scheduler 'plateau'"},
      {with("scheduler", "name = \"step\""), "job.toml: scheduler.step_size: missing: step needs"},
      {with("scheduler", "name = \"step\"\nstep_size = 0"), "job.toml: scheduler.step_size: must be >= 1, got 0"},
      {with("scheduler", "name = \"step\"\nstep_size = 2\nt_max = 3"), "job.toml: scheduler.t_max: not an option of step (name, per, step_size, gamma)"},
      {with("scheduler", "name = \"step\"\nstep_size = 2\ngamma = 0"), "job.toml: scheduler.gamma: must be > 0, got 0"},
      {with("scheduler", "name = \"step\"\nstep_size = 2\nper = \"batch\""), "job.toml: scheduler.per: unknown value 'batch' (update, epoch)"},
      {with("scheduler", "name = \"multistep\""), "job.toml: scheduler.milestones: missing"},
      {with("scheduler", "name = \"multistep\"\nmilestones = [5, 3]"), "job.toml: scheduler.milestones: must increase, got 3 after 5"},
      {with("scheduler", "name = \"multistep\"\nmilestones = []"), "job.toml: scheduler.milestones: must not be empty"},
      {with("scheduler", "name = \"multistep\"\nmilestones = [0]"), "job.toml: scheduler.milestones: must hold positive integers"},
      {with("scheduler", "name = \"exponential\""), "job.toml: scheduler.gamma: missing"},
      {with("scheduler", "name = \"cosine\""), "job.toml: scheduler.t_max: missing"},
      {with("scheduler", "name = \"cosine\"\nt_max = 5\neta_min = -1"), "job.toml: scheduler.eta_min: must be >= 0, got -1"},
      {with("scheduler", "name = \"linear_warmup\""), "job.toml: scheduler.warmup_steps: missing"},
      {with("scheduler", "name = \"linear_warmup\"\nwarmup_steps = 5\nstart_factor = 0"), "job.toml: scheduler.start_factor: must be > 0, got 0"},
      {with("scheduler", "name = \"linear_warmup\"\nwarmup_steps = 5\nstart_factor = 1.5"), "job.toml: scheduler.start_factor: must be <= 1, got 1.5"},
      {with("scheduler", "name = \"warmup_cosine\"\nwarmup_steps = 5"), "job.toml: scheduler.t_max: missing: warmup_cosine needs"},
      {with("scheduler", "name = \"warmup_cosine\"\nt_max = 5"), "job.toml: scheduler.warmup_steps: missing"},
      {with("scheduler", "name = \"warmup_cosine\"\nt_max = 5\nwarmup_steps = 2\ngamma = 0.1"),
       "job.toml: scheduler.gamma: not an option of warmup_cosine (name, per, warmup_steps, start_factor, t_max, eta_min)"},
      {with("scheduler", "name = \"warmup_linear\"\ntotal_steps = 10"), "job.toml: scheduler.warmup_steps: missing: warmup_linear needs"},
      {with("scheduler", "name = \"warmup_linear\"\nwarmup_steps = 2"), "job.toml: scheduler.total_steps: missing: warmup_linear needs"},
      {with("scheduler", "name = \"warmup_linear\"\nwarmup_steps = -1\ntotal_steps = 10"),
       "job.toml: scheduler.warmup_steps: must be >= 0, got -1"},
      {with("scheduler", "name = \"warmup_linear\"\nwarmup_steps = 1\ntotal_steps = 10\nstart_factor = 0.5"),
       "job.toml: scheduler.start_factor: not an option of warmup_linear (name, per, warmup_steps, total_steps)"},
      {with("scheduler", "name = \"linear\""),
       "job.toml: scheduler.name: unknown scheduler 'linear'; HF Trainer's lr_scheduler_type linear is [scheduler] name = \"warmup_linear\""},
      {with("scheduler", "num_training_steps = 10\nname = \"warmup_linear\""),
       "job.toml: scheduler.num_training_steps: unknown key; transformers' num_training_steps is [scheduler] total_steps"},
      {with("scheduler", "name = \"onecycle\"\ntotal_steps = 10"), "job.toml: scheduler.max_lr: missing: onecycle needs the peak"},
      {with("scheduler", "name = \"onecycle\"\nmax_lr = 0.1"), "job.toml: scheduler.total_steps: missing"},
      {with("scheduler", "name = \"onecycle\"\nmax_lr = 0\ntotal_steps = 10"), "job.toml: scheduler.max_lr: must be > 0, got 0"},
      {with("scheduler", "name = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 10\npct_start = 1.5"),
       "job.toml: scheduler.pct_start: must be <= 1, got 1.5"},
      {with("scheduler", "name = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 10\npct_start = 0.1"),
       "job.toml: scheduler.pct_start: pct_start * total_steps = 1 leaves a phase of the cycle empty"},
      {with("scheduler", "name = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 10\nanneal_strategy = \"cosine\""),
       "job.toml: scheduler.anneal_strategy: unknown anneal strategy 'cosine' (cos, linear)"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"adagrad\"\n"
       "[scheduler]\nname = \"onecycle\"\nmax_lr = 0.1\ntotal_steps = 10\n",
       "job.toml: scheduler.cycle_momentum: adagrad has no momentum to cycle: set cycle_momentum = false"},
      // Other trainers' names: the equivalent here; a typo: the nearest known key.
      {"train_micro_batch_size_per_gpu = 4\n" + kMinimal,
       "job.toml: train_micro_batch_size_per_gpu: unknown key; DeepSpeed's train_micro_batch_size_per_gpu is "
       "[train] batch_size / micro_batches"},
      {"[fp16]\nenabled = true\n" + kMinimal, "job.toml: fp16: unknown table; DeepSpeed's and HF Trainer's fp16 is "
                                                "[train] autocast = \"fp16\" here (docs/job-file.md#other-trainers)"},
      {with("train", "gradient_accumulation_steps = 4"),
       "job.toml: train.gradient_accumulation_steps: unknown key; DeepSpeed's and HF Trainer's "
       "gradient_accumulation_steps is [train] update_frequency here"},
      {with("train", "gradient_clipping = 1.0"), "job.toml: train.gradient_clipping: unknown key; DeepSpeed's gradient_clipping is [train] grad_clip_norm"},
      {with("train", "max_grad_norm = 1.0"), "job.toml: train.max_grad_norm: unknown key; HF Trainer's max_grad_norm is [train] grad_clip_norm"},
      {with("train", "num_train_epochs = 3"), "job.toml: train.num_train_epochs: unknown key; HF Trainer's num_train_epochs is [train] epochs"},
      {with("train", "warmup_steps = 3"), "job.toml: train.warmup_steps: unknown key; HF Trainer's warmup_steps is [scheduler] warmup_steps"},
      {with("optimizer", "params = { lr = 0.1 }"),
       "job.toml: optimizer.params: unknown key; DeepSpeed's params is the keys of the table itself (optimizer.params.lr is [optimizer] lr"},
      {with("optimizer", "type = \"AdamW\""), "job.toml: optimizer.type: unknown key; DeepSpeed's type is name"},
      {with("scheduler", "name = \"WarmupCosineLR\""),
       "job.toml: scheduler.name: unknown scheduler 'WarmupCosineLR'; DeepSpeed's WarmupCosineLR is [scheduler] name = \"warmup_cosine\""},
      {with("scheduler", "name = \"OneCycleLR\""), "job.toml: scheduler.name: unknown scheduler 'OneCycleLR'; PyTorch's OneCycleLR is [scheduler] name = \"onecycle\""},
      {with("scheduler", "name = \"warmup_cosin\""), "job.toml: scheduler.name: unknown scheduler 'warmup_cosin'; did you mean 'warmup_cosine'?"},
      {with("scheduler", "name = \"cosine\"\ntmax = 5"), "job.toml: scheduler.tmax: unknown key; did you mean 't_max'?"},
      {with("data", "fromat = \"csv\""), "job.toml: data.fromat: unknown key; did you mean 'format'?"},
      {"[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"AdamW\"\n",
       "job.toml: optimizer.name: unknown optimizer 'AdamW'; did you mean 'adamw'?"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of(c.text);
    INFO("job:\n" << c.text << "\nerror: " << message);
    CHECK(contains(message, c.expected));
  }
}

TEST_CASE("load_job reads a file and names it in errors") {
  const auto dir = std::filesystem::temp_directory_path() / ("ravnest-job-spec-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "job.toml").string();
  {
    std::ofstream(path) << kMinimal;
  }
  const JobSpec job = load_job(path);
  CHECK(job.origin == path);
  CHECK(job.data.train.resolved == (dir / "train.csv").string());
  {
    std::ofstream(path) << with("optimizer", "lr = \"fast\"");
  }
  try {
    load_job(path);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ": optimizer.lr: must be a number, got a string");
  }
  try {
    load_job((dir / "missing.toml").string());
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == (dir / "missing.toml").string() + ": cannot read the job file");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the example jobs in configs/ parse") {
  const char* source = std::getenv("RAVNEST_SOURCE_DIR");
  REQUIRE(source);
  for (const char* name : {"job_digits.toml", "job_mnist.toml"}) {
    INFO(name);
    const JobSpec job = load_job(std::string(source) + "/configs/" + name);
    CHECK(job.train.epochs >= 1);
  }
}

TEST_CASE("job_paths_for: the root reads the data, the leaf a script loss", "[config][job]") {
  auto job = parse_job(with("data", "validation = \"val.csv\""), "job.toml");
  job.loss.name = LossName::kScript;
  job.loss.path = {"loss.pt", "/jobs/loss.pt"};
  NodeMetadata root, stem, leaf, alone;
  root.position = 0;
  stem.position = 1;
  leaf.position = 2;
  leaf.returns_model_output = true;
  alone.position = 0;
  alone.returns_model_output = true;
  auto fields = [&](const NodeMetadata& node) {
    std::string out;
    for (const auto& path : job_paths_for(job, node)) out += path.field + "=" + path.path.raw + " ";
    return out;
  };
  CHECK(fields(root) == "data.train=train.csv data.validation=val.csv ");
  CHECK(fields(stem).empty());
  CHECK(fields(leaf) == "loss.path=loss.pt ");
  CHECK(fields(alone) == "data.train=train.csv data.validation=val.csv loss.path=loss.pt ");
  // [data] order ships with the training data, to the root only.
  job = parse_job(with("data", "order = \"order.pt\""), "job.toml");
  CHECK(job.data.order.raw == "order.pt");
  CHECK(fields(root) == "data.train=train.csv data.order=order.pt ");
  CHECK(fields(leaf).empty());
}

TEST_CASE("[compression]: a codec per kind of tensor, none by default", "[config][job][compression]") {
  const JobSpec plain = parse_job(kMinimal, "job.toml");
  CHECK(plain.compression.activations == WireCodec::kNone);
  CHECK(plain.compression.gradients == WireCodec::kNone);
  CHECK(plain.compression.rings == WireCodec::kNone);
  CHECK_FALSE(plain.compression.any());
  const JobSpec job = parse_job(
      with("compression", "activations = \"fp16\"\ngradients = \"int8\"\nrings = \"none\""), "job.toml");
  CHECK(job.compression.activations == WireCodec::kFp16);
  CHECK(job.compression.gradients == WireCodec::kInt8);
  CHECK(job.compression.rings == WireCodec::kNone);
  CHECK(job.compression.any());
  CHECK(parse_job(with("compression", "gradients = \"bf16\""), "job.toml").compression.gradients ==
        WireCodec::kBf16);
  CHECK(parse_job(with("compression", "rings = \"int8\""), "job.toml").compression.rings ==
        WireCodec::kInt8);
  CHECK(error_of(with("compression", "rings = \"int4\"")) ==
        "job.toml: compression.rings: unknown codec 'int4' (none, fp16, bf16, int8)");
  CHECK(std::string(to_string(WireCodec::kInt8)) == "int8");
  CHECK(error_of(with("compression", "activations = \"float16\"")) ==
        "job.toml: compression.activations: unknown codec 'float16' (none, fp16, bf16, int8)");
  CHECK(error_of(with("compression", "rings = 8")) ==
        "job.toml: compression.rings: must be a string, got an integer");
  CHECK(contains(error_of(with("compression", "weights = \"fp16\"")),
                 "job.toml: compression.weights: unknown key (activations, gradients, rings)"));
  CHECK(contains(error_of("compression = true\n" + kMinimal),
                 "job.toml: compression: must be a table [compression], got a boolean"));
}

TEST_CASE("job spec: [train] deterministic, false unless asked", "[job]") {
  CHECK_FALSE(parse_job(kMinimal, "job.toml").train.deterministic);
  CHECK(parse_job(with("train", "deterministic = true"), "job.toml").train.deterministic);
  CHECK_FALSE(parse_job(with("train", "deterministic = false"), "job.toml").train.deterministic);
  CHECK(error_of(with("train", "deterministic = 1")) ==
        "job.toml: train.deterministic: must be true or false, got an integer");
}

TEST_CASE("job spec: the asynchronous schedule and its max_in_flight", "[job]") {
  const auto job = parse_job(with("train", "schedule = \"async\"\nmax_in_flight = 5"), "job.toml");
  CHECK(job.train.schedule == PipelineSchedule::kAsync);
  CHECK(job.train.max_in_flight == 5);
  CHECK(std::string(to_string(PipelineSchedule::kAsync)) == "async");
  CHECK(parse_job(with("train", "schedule = \"async\""), "job.toml").train.max_in_flight == 0);
}

TEST_CASE("[ps]: how the servers combine gradients", "[config][job][ps]") {
  const JobSpec plain = parse_job(kMinimal, "job.toml");
  CHECK_FALSE(plain.ps.present);
  CHECK(plain.ps.mode == PsMode::kSync);
  const JobSpec sync = parse_job(with("ps", "eval_freq = 5"), "job.toml");
  CHECK(sync.ps.present);
  CHECK(sync.ps.mode == PsMode::kSync);
  CHECK(sync.ps.eval_freq == 5);
  const JobSpec backup = parse_job(with("ps", "mode = \"backup\"\nbackup = 2"), "job.toml");
  CHECK(backup.ps.mode == PsMode::kBackup);
  CHECK(backup.ps.backup == 2);
  const JobSpec async = parse_job(with("ps", "mode = \"async\"\nmax_staleness = 0"), "job.toml");
  CHECK(async.ps.mode == PsMode::kAsync);
  CHECK(async.ps.max_staleness == 0);
  CHECK(std::string(to_string(PsMode::kBackup)) == "backup");
  CHECK(error_of(with("ps", "mode = \"eventual\"")) ==
        "job.toml: ps.mode: unknown mode 'eventual' (sync, backup, async)");
  CHECK(contains(error_of(with("ps", "mode = \"backup\"")), "job.toml: ps.backup: mode = "));
  CHECK(contains(error_of(with("ps", "backup = 2")), "job.toml: ps.backup: only with mode"));
  CHECK(contains(error_of(with("ps", "mode = \"backup\"\nbackup = 0")), "job.toml: ps.backup:"));
  CHECK(contains(error_of(with("ps", "mode = \"async\"")), "job.toml: ps.max_staleness:"));
  CHECK(contains(error_of(with("ps", "max_staleness = 3")),
                 "job.toml: ps.max_staleness: only with mode"));
  CHECK(contains(error_of(with("ps", "eval_freq = -1")), "job.toml: ps.eval_freq:"));
  CHECK(contains(error_of(with("ps", "servers = 2")),
                 "job.toml: ps.servers: unknown key (mode, backup, max_staleness, eval_freq)"));
}

TEST_CASE("check_job_for_plan: [ps] against the plan", "[config][job][ps]") {
  NodeMetadata stage;
  stage.role = Role::kRootLeaf;
  NodeMetadata worker;
  worker.role = Role::kWorker;
  worker.parameter_server.servers = {{0, "h:0", {"w"}}};
  worker.parameter_server.workers = {{1, "h:1"}, {2, "h:2"}};
  auto refusal = [](const std::string& text, const std::vector<NodeMetadata>& nodes) {
    try {
      check_job_for_plan(parse_job(text, "job.toml"), nodes, "job.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal(kMinimal, {stage}).empty());
  CHECK(refusal(kMinimal, {worker}).empty());  // sync by default
  CHECK(contains(refusal(with("ps", "eval_freq = 2"), {stage}),
                 "job.toml: ps: this plan has no parameter server"));
  CHECK(refusal(with("ps", "mode = \"backup\"\nbackup = 2"), {worker}).empty());
  CHECK(refusal(with("ps", "mode = \"backup\"\nbackup = 3"), {worker}) ==
        "job.toml: ps.backup: 3 is more than the plan's 2 workers");
  worker.parameter_server.evaluator = PsPeer{3, "h:3"};
  CHECK(contains(refusal(kMinimal, {worker}),
                 "job.toml: data.validation: the plan's evaluator (node_3) scores the model on it"));
  CHECK(refusal(with("data", "validation = \"val.csv\""), {worker}).empty());
  // The servers step the shards: nobody holds the whole update to clip or to skip.
  const std::string validated = with("data", "validation = \"val.csv\"");
  auto with_train = [&](const std::string& extra) { return validated + "[train]\n" + extra + "\n"; };
  CHECK(refusal(with_train("grad_clip_norm = 1"), {worker}) ==
        "job.toml: train.grad_clip_norm: not with a parameter-server plan (its servers step the "
        "shards)");
  CHECK(contains(refusal(with_train("grad_clip_value = 1"), {worker}), "train.grad_clip_value: not"));
  CHECK(contains(refusal(with_train("autocast = \"fp16\""), {worker}),
                 "job.toml: train.autocast: \"fp16\" (its loss scaler) not with a parameter-server plan"));
  CHECK(refusal(with_train("autocast = \"bf16\""), {worker}).empty());
  CHECK(refusal(with_train("grad_clip_norm = 1\nautocast = \"fp16\""), {stage}).empty());
}

TEST_CASE("[sparse_optimizer]: how a hybrid plan's servers step their tables",
          "[config][job][hybrid]") {
  CHECK_FALSE(parse_job(kMinimal, "job.toml").sparse_optimizer);
  const auto adam = parse_job(with("sparse_optimizer", "name = \"sparse_adam\"\nlr = 0.01"), "job.toml");
  REQUIRE(adam.sparse_optimizer);
  CHECK(adam.sparse_optimizer->name == SparseOptimizerName::kSparseAdam);
  CHECK(adam.sparse_optimizer->lr == 0.01);
  CHECK(adam.sparse_optimizer->betas == std::pair<double, double>{0.9, 0.999});
  CHECK(adam.sparse_optimizer->eps == 1e-8);
  const auto adagrad = parse_job(
      with("sparse_optimizer", "name = \"adagrad\"\nlr = 0.1\nlr_decay = 0.5\n"
                               "initial_accumulator_value = 0.2"),
      "job.toml");
  CHECK(adagrad.sparse_optimizer->name == SparseOptimizerName::kAdagrad);
  CHECK(adagrad.sparse_optimizer->eps == 1e-10);
  CHECK(adagrad.sparse_optimizer->lr_decay == 0.5);
  CHECK(adagrad.sparse_optimizer->initial_accumulator_value == 0.2);
  CHECK(std::string(to_string(SparseOptimizerName::kSparseAdam)) == "sparse_adam");

  CHECK(contains(error_of(with("sparse_optimizer", "lr = 0.1")),
                 "job.toml: sparse_optimizer.name: missing (sgd, adagrad, sparse_adam)"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"adam\"\nlr = 0.1")),
                 "job.toml: sparse_optimizer.name: unknown sparse optimizer 'adam'"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sgd\"")),
                 "job.toml: sparse_optimizer.lr: missing"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sgd\"\nlr = 0")),
                 "job.toml: sparse_optimizer.lr:"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sgd\"\nlr = 0.1\nmomentum = 0.9")),
                 "job.toml: sparse_optimizer.momentum: not an option of sgd on a sparse table"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sparse_adam\"\nlr = 0.1\n"
                                                   "lr_decay = 0.1")),
                 "job.toml: sparse_optimizer.lr_decay: not an option of sparse_adam"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sparse_adam\"\nlr = 0.1\n"
                                                   "betas = [0.9, 1.0]")),
                 "job.toml: sparse_optimizer.betas: each must be in [0, 1)"));
  CHECK(contains(error_of(with("sparse_optimizer", "name = \"sgd\"\nlr = 0.1\nrows = 3")),
                 "job.toml: sparse_optimizer.rows: unknown key"));

  // Against the plan.
  NodeMetadata trainer;
  trainer.role = Role::kWorker;
  trainer.parameter_server.servers = {{0, "h:0", {"emb.weight"}}};
  trainer.parameter_server.workers = {{1, "h:1"}, {2, "h:2"}};
  trainer.parameter_server.sparse_tables = {{"emb.weight", 0, 0, {10, 4}}};
  NodeMetadata worker = trainer;
  worker.parameter_server.sparse_tables.clear();
  auto refusal = [](const std::string& text, const std::vector<NodeMetadata>& nodes) {
    try {
      check_job_for_plan(parse_job(text, "job.toml"), nodes, "job.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string sgd = with("sparse_optimizer", "name = \"sgd\"\nlr = 0.1");
  CHECK(refusal(sgd, {trainer}).empty());
  CHECK(contains(refusal(kMinimal, {trainer}),
                 "job.toml: sparse_optimizer: the plan's servers hold emb.weight"));
  CHECK(contains(refusal(sgd, {worker}), "job.toml: sparse_optimizer: this plan has no sparse tables"));
  CHECK(contains(refusal(sgd + "\n[ps]\nmode = \"async\"\nmax_staleness = 2\n", {trainer}),
                 "job.toml: ps.mode: a hybrid plan trains synchronously only"));
}

TEST_CASE("prediction job: the training job's [data] over other data, [predict] added",
          "[config][job][predict]") {
  const std::string training = R"(
[train]
epochs = 5
batch_size = 32
micro_batches = 8
max_steps = 40
val_freq = 2
schedule = "1f1b"
[data]
format = "csv"
train = "train.csv"
validation = "val.csv"
label_column = "label"
input_shape = [1, 8, 8]
scale = 0.0625
[loss]
name = "cross_entropy"
[optimizer]
name = "adam"
[scheduler]
name = "step"
step_size = 10
)";
  const auto text = prediction_job_text(training, "/jobs/job.toml", "/data/new.csv");
  const auto job = parse_job(text, "/jobs/job.toml");
  CHECK(job.predict);
  CHECK(job.data.train.resolved == "/data/new.csv");
  CHECK(job.data.validation.empty());
  CHECK(job.data.input_shape == std::vector<int64_t>{1, 8, 8});
  CHECK(job.data.scale == 0.0625);
  CHECK(job.data.label_column == "label");
  CHECK(job.train.epochs == 1);
  CHECK_FALSE(job.train.max_steps);
  CHECK_FALSE(job.train.shuffle);
  CHECK(job.train.batch_size == 32);
  CHECK(job.train.micro_batches == 8);
  CHECK_FALSE(job.scheduler);

  // --batch-size: micro-batches never outnumber its samples.
  const auto small = parse_job(prediction_job_text(training, "job.toml", "/d.csv", 4), "job.toml");
  CHECK(small.train.batch_size == 4);
  CHECK(small.train.micro_batches == 4);
  try {
    prediction_job_text(training, "job.toml", "/d.csv", 0);
    FAIL("a batch size of 0");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "--batch-size: must be at least 1, got 0");
  }
  // A job that is not one fails as it would for training, naming its file.
  try {
    prediction_job_text("[train]\nepochs = 1\n", "bad.toml", "/d.csv");
    FAIL("not a job");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).rfind("bad.toml: ", 0) == 0);
  }
  // [predict] takes no keys; any other table name lists it.
  CHECK(parse_job(kMinimal + "[predict]\n", "job.toml").predict);
  CHECK_FALSE(parse_job(kMinimal, "job.toml").predict);
  CHECK(contains(error_of(kMinimal + "[predict]\nout = \"x.pt\"\n"), "job.toml: predict.out: unknown key"));
  CHECK(contains(error_of(kMinimal + "[predicts]\n"), "[sparse_optimizer], [predict], [outer])"));
}

TEST_CASE("a job file over the size one message carries is refused, naming the file and limit") {
  // Issue 28: a job file over 1 MiB failed with "load job: Connection reset by peer" after the
  // data shipped (the daemon closes a connection whose message passes limits.message_bytes).
  std::string text = kMinimal + "# " + std::string(kMaxJobFileBytes, 'x') + "\n";
  CHECK(error_of(text) == "job.toml: " + std::to_string(text.size()) +
                              " bytes, more than the 128 KiB a job file may be (it travels to "
                              "every node in one message)");
  // Just under the limit is a job.
  text = kMinimal + "# " + std::string(kMaxJobFileBytes - kMinimal.size() - 3, 'x') + "\n";
  REQUIRE(text.size() == kMaxJobFileBytes);
  CHECK_NOTHROW(parse_job(text, "job.toml"));
  // From a file, no more than the limit is read (an endless file is refused as well).
  try {
    load_job("/dev/zero");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& error) {
    CHECK(std::string(error.what()) ==
          "/dev/zero: " + std::to_string(kMaxJobFileBytes + 1) +
              " bytes or more, more than the 128 KiB a job file may be (it travels to every node "
              "in one message)");
  }
}

TEST_CASE("train: gradient clipping and autocast") {
  const JobSpec defaults = parse_job(kMinimal, "job.toml");
  CHECK_FALSE(defaults.train.grad_clip_norm);
  CHECK_FALSE(defaults.train.grad_clip_value);
  CHECK(defaults.train.grad_clip_norm_type == 2.0);
  CHECK(defaults.train.autocast == Autocast::kOff);

  const JobSpec set = parse_job(with("train", "grad_clip_norm = 0.5\ngrad_clip_norm_type = 1\n"
                                              "grad_clip_value = 2\nautocast = \"bf16\""),
                                "job.toml");
  CHECK(*set.train.grad_clip_norm == 0.5);
  CHECK(set.train.grad_clip_norm_type == 1.0);
  CHECK(*set.train.grad_clip_value == 2.0);
  CHECK(set.train.autocast == Autocast::kBf16);
  CHECK(std::isinf(parse_job(with("train", "grad_clip_norm = 1\ngrad_clip_norm_type = \"inf\""),
                             "job.toml")
                       .train.grad_clip_norm_type));
  CHECK(parse_job(with("train", "autocast = \"fp16\""), "job.toml").train.autocast ==
        Autocast::kFp16);

  CHECK(contains(error_of(with("train", "grad_clip_norm = 0")), "train.grad_clip_norm: must be > 0"));
  CHECK(contains(error_of(with("train", "grad_clip_norm_type = 2")),
                 "train.grad_clip_norm_type: only with grad_clip_norm"));
  const std::string norm_type_error =
      error_of(with("train", "grad_clip_norm = 1\ngrad_clip_norm_type = \"max\""));
  INFO(norm_type_error);
  CHECK(contains(norm_type_error, "train.grad_clip_norm_type: must be a number > 0 or 'inf', got 'max'"));
  CHECK(contains(error_of(with("train", "autocast = \"fp8\"")),
                 "train.autocast: unknown autocast dtype 'fp8' (off, bf16, fp16)"));
  CHECK(contains(error_of(with("train", "schedule = \"async\"\ngrad_clip_norm = 1")),
                 "train.grad_clip_norm: only with schedule = \"gpipe\" or \"1f1b\""));
  CHECK(contains(error_of(with("train", "schedule = \"async\"\nautocast = \"fp16\"")),
                 "train.autocast: \"fp16\" only with schedule"));
  // bf16 needs no scaler: the asynchronous schedule takes it.
  CHECK(parse_job(with("train", "schedule = \"async\"\nautocast = \"bf16\""), "job.toml")
            .train.autocast == Autocast::kBf16);
}

TEST_CASE("train: the fp16 loss scaler's arguments (GradScaler's, under their names)") {
  // torch.amp.GradScaler's defaults.
  const auto defaults = parse_job(with("train", "autocast = \"fp16\""), "job.toml").train.scaler;
  CHECK(defaults.init_scale == 65536.0);
  CHECK(defaults.growth_factor == 2.0);
  CHECK(defaults.backoff_factor == 0.5);
  CHECK(defaults.growth_interval == 2000);
  const auto set = parse_job(with("train", "autocast = \"fp16\"\nscaler_init_scale = 1099511627776\n"
                                           "scaler_growth_factor = 4\nscaler_backoff_factor = 0.25\n"
                                           "scaler_growth_interval = 3"),
                             "job.toml")
                       .train.scaler;
  CHECK(set.init_scale == 1099511627776.0);
  CHECK(set.growth_factor == 4.0);
  CHECK(set.backoff_factor == 0.25);
  CHECK(set.growth_interval == 3);

  CHECK(contains(error_of(with("train", "autocast = \"bf16\"\nscaler_init_scale = 1024")),
                 "train.scaler_init_scale: only with autocast = \"fp16\""));
  CHECK(contains(error_of(with("train", "scaler_growth_interval = 10")),
                 "train.scaler_growth_interval: only with autocast = \"fp16\""));
  const std::string fp16 = "autocast = \"fp16\"\n";
  CHECK(contains(error_of(with("train", fp16 + "scaler_init_scale = 0")),
                 "train.scaler_init_scale: must be > 0"));
  CHECK(contains(error_of(with("train", fp16 + "scaler_init_scale = 1e39")),
                 "train.scaler_init_scale: must be <="));
  CHECK(contains(error_of(with("train", fp16 + "scaler_growth_factor = 1")),
                 "train.scaler_growth_factor: must be > 1"));
  CHECK(contains(error_of(with("train", fp16 + "scaler_backoff_factor = 1")),
                 "train.scaler_backoff_factor: must be < 1"));
  CHECK(contains(error_of(with("train", fp16 + "scaler_backoff_factor = 0")),
                 "train.scaler_backoff_factor: must be > 0"));
  CHECK(contains(error_of(with("train", fp16 + "scaler_growth_interval = 0")),
                 "train.scaler_growth_interval: must be"));
}

TEST_CASE("[outer]: DiLoCo's outer optimizer, its keys, defaults and refusals") {
  CHECK_FALSE(parse_job(kMinimal, "job.toml").outer);
  const JobSpec job = parse_job(kMinimal + "[outer]\nlr = 0.7\nevery = 20\n", "job.toml");
  REQUIRE(job.outer);
  CHECK(job.outer->name == OuterName::kNesterov);
  CHECK(job.outer->nesterov());
  CHECK(job.outer->lr == 0.7);
  CHECK(job.outer->momentum == 0.9);
  CHECK(job.outer->every == 20);
  // H and OpenDiLoCo's inner_steps are the same key; plain momentum as "sgd".
  const JobSpec h = parse_job(kMinimal + "[outer]\nname = \"sgd\"\nlr = 1\nmomentum = 0\nH = 3\n", "job.toml");
  CHECK(h.outer->name == OuterName::kSgd);
  CHECK_FALSE(h.outer->nesterov());
  CHECK(h.outer->momentum == 0);
  CHECK(h.outer->every == 3);
  CHECK(parse_job(kMinimal + "[outer]\nlr = 1\ninner_steps = 5\n", "job.toml").outer->every == 5);

  CHECK(error_of(kMinimal + "[outer]\nname = \"nestrov\"\nlr = 1\nevery = 2\n").find(
            "outer.name: unknown outer optimizer 'nestrov'; did you mean 'nesterov'?") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nevery = 2\n").find("outer.lr: missing") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 0\nevery = 2\n").find("outer.lr: must be > 0") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\nmomentum = 1\nevery = 2\n").find("outer.momentum: must be < 1") !=
        std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\nmomentum = 0\nevery = 2\n").find("outer.momentum: nesterov needs") !=
        std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\n").find("outer.every: missing") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\nevery = 0\n").find("outer.every: must be >= 1") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\nevery = 2\nH = 2\n").find("outer.H: give H once") != std::string::npos);
  CHECK(error_of(kMinimal + "[outer]\nlr = 1\nevery = 2\nbeta = 2\n").find("outer.beta: unknown key") !=
        std::string::npos);
  CHECK(error_of("[train]\nreduce = \"gradients\"\n" + kMinimal + "[outer]\nlr = 1\nevery = 2\n")
            .find("outer.every: with train.reduce = \"gradients\"") != std::string::npos);
  CHECK(error_of("[train]\nreduce_factor = 4\n" + kMinimal + "[outer]\nlr = 1\nevery = 2\n")
            .find("outer.every: replaces train.reduce_factor") != std::string::npos);
  CHECK(error_of("[train]\naverage_optim = true\n" + kMinimal + "[outer]\nlr = 1\nevery = 2\n")
            .find("outer.every: with train.average_optim") != std::string::npos);
  CHECK(error_of(kMinimal + "[outr]\nlr = 1\n").find("did you mean [outer]?") != std::string::npos);
}
