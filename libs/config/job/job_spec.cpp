// Long because: job.toml has one reader, a parse_<section> per [section] beside its neighbours
// (the rules between sections are checked where both are at hand); no one section is long.
#include "libs/config/job/job_spec.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "libs/base/config_error.h"
#include "libs/config/job/compression_spec.h"
#include "libs/config/job/job_section.h"
#include "libs/base/printable.h"
#include "libs/base/toml_error.h"

namespace ravnest::config {
namespace {

namespace fs = std::filesystem;
using namespace job_section;

const std::vector<std::pair<std::string, PipelineSchedule>>& schedule_names() {
  static const std::vector<std::pair<std::string, PipelineSchedule>> names = {
      {"gpipe", PipelineSchedule::kGPipe}, {"1f1b", PipelineSchedule::k1F1B},
      {"async", PipelineSchedule::kAsync}};
  return names;
}
const std::vector<std::pair<std::string, ReduceMode>>& reduce_names() {
  static const std::vector<std::pair<std::string, ReduceMode>> names = {
      {"parameters", ReduceMode::kParameters}, {"gradients", ReduceMode::kGradients}};
  return names;
}
const std::vector<std::pair<std::string, DataFormat>>& format_names() {
  static const std::vector<std::pair<std::string, DataFormat>> names = {
      {"csv", DataFormat::kCsv}, {"mnist", DataFormat::kMnist},
      {"cifar10", DataFormat::kCifar10}, {"tensors", DataFormat::kTensors}};
  return names;
}
const std::vector<std::pair<std::string, LossName>>& loss_names() {
  static const std::vector<std::pair<std::string, LossName>> names = {
      {"cross_entropy", LossName::kCrossEntropy}, {"nll", LossName::kNll},
      {"mse", LossName::kMse},                    {"l1", LossName::kL1},
      {"bce_with_logits", LossName::kBceWithLogits}, {"script", LossName::kScript}};
  return names;
}
const std::vector<std::pair<std::string, OptimizerName>>& optimizer_names() {
  static const std::vector<std::pair<std::string, OptimizerName>> names = {
      {"sgd", OptimizerName::kSgd},         {"adam", OptimizerName::kAdam},
      {"adamw", OptimizerName::kAdamW},     {"rmsprop", OptimizerName::kRmsprop},
      {"adagrad", OptimizerName::kAdagrad}, {"lamb", OptimizerName::kLamb}};
  return names;
}
const std::vector<std::pair<std::string, SchedulerName>>& scheduler_names() {
  static const std::vector<std::pair<std::string, SchedulerName>> names = {
      {"step", SchedulerName::kStep},
      {"multistep", SchedulerName::kMultiStep},
      {"exponential", SchedulerName::kExponential},
      {"cosine", SchedulerName::kCosine},
      {"linear_warmup", SchedulerName::kLinearWarmup},
      {"warmup_cosine", SchedulerName::kWarmupCosine},
      {"warmup_linear", SchedulerName::kWarmupLinear},
      {"onecycle", SchedulerName::kOneCycle}};
  return names;
}
const std::vector<std::pair<std::string, AnnealStrategy>>& anneal_names() {
  static const std::vector<std::pair<std::string, AnnealStrategy>> names = {
      {"cos", AnnealStrategy::kCos}, {"linear", AnnealStrategy::kLinear}};
  return names;
}
const std::vector<std::pair<std::string, SchedulerPer>>& per_names() {
  static const std::vector<std::pair<std::string, SchedulerPer>> names = {
      {"update", SchedulerPer::kUpdate}, {"epoch", SchedulerPer::kEpoch}};
  return names;
}

JobPath resolve(const std::string& raw, const std::string& base_dir) {
  JobPath path;
  path.raw = raw;
  const fs::path p(raw);
  path.resolved = (p.is_absolute() ? p : fs::path(base_dir) / p).lexically_normal().string();
  return path;
}

std::optional<JobPath> path_field(const Section& section, const std::string& key,
                                  const std::string& base_dir) {
  auto raw = section.string(key);
  if (!raw) return std::nullopt;
  if (raw->empty()) section.fail(key, "must not be empty");
  return resolve(*raw, base_dir);
}

// ------------------------------------------------------------------------------- sections

// grad_clip_* and autocast: what the update does to the gradients, and the forward's precision.
void parse_train_knobs(const Section& s, TrainSpec& t) {
  const bool asynchronous = t.schedule == PipelineSchedule::kAsync;
  if (auto v = s.number("grad_clip_norm", 0, /*exclusive=*/true)) t.grad_clip_norm = *v;
  if (s.has("grad_clip_norm_type")) {
    if (!t.grad_clip_norm) s.fail("grad_clip_norm_type", "only with grad_clip_norm");
    const toml::node* text = s.node("grad_clip_norm_type");
    if (text && text->is_string()) {
      if (text->as_string()->get() != "inf") {
        s.fail("grad_clip_norm_type", "must be a number > 0 or 'inf', got " +
                                          in_quotes(base::printable(text->as_string()->get(), 40)));
      }
      t.grad_clip_norm_type = INFINITY;
    } else {
      t.grad_clip_norm_type = *s.number("grad_clip_norm_type", 0, /*exclusive=*/true);
    }
  }
  if (auto v = s.number("grad_clip_value", 0, /*exclusive=*/true)) t.grad_clip_value = *v;
  if (auto v = s.string("autocast")) {
    static const std::vector<std::pair<std::string, Autocast>> names = {
        {"off", Autocast::kOff}, {"bf16", Autocast::kBf16}, {"fp16", Autocast::kFp16}};
    t.autocast = choose(s, "autocast", *v, names, "autocast dtype");
  }
  for (const char* key : {"scaler_init_scale", "scaler_growth_factor", "scaler_backoff_factor",
                          "scaler_growth_interval"}) {
    if (s.has(key) && t.autocast != Autocast::kFp16) s.fail(key, "only with autocast = \"fp16\"");
  }
  // PyTorch keeps the scale as a float32 tensor: a larger one would be inf from the start.
  if (auto v = s.number("scaler_init_scale", 0, /*exclusive=*/true, FLT_MAX)) {
    t.scaler.init_scale = *v;
  }
  if (auto v = s.number("scaler_growth_factor", 1, /*exclusive=*/true)) t.scaler.growth_factor = *v;
  if (auto v = s.number("scaler_backoff_factor", 0, /*exclusive=*/true, 1)) {
    if (*v == 1) s.fail("scaler_backoff_factor", "must be < 1, got 1");
    t.scaler.backoff_factor = *v;
  }
  if (auto v = s.integer("scaler_growth_interval", 1)) t.scaler.growth_interval = *v;
  // The asynchronous schedule updates each stage on its own time: there is no one gradient of
  // the whole model to take the norm of, nor one step for every stage to skip.
  if (asynchronous && t.grad_clip_norm) {
    s.fail("grad_clip_norm", "only with schedule = \"gpipe\" or \"1f1b\" (async stages update apart)");
  }
  if (asynchronous && t.autocast == Autocast::kFp16) {
    s.fail("autocast", "\"fp16\" only with schedule = \"gpipe\" or \"1f1b\" (its loss scaler "
                       "skips a step on every stage at once)");
  }
}

TrainSpec parse_train(const Section& s) {
  s.check_known({"epochs", "batch_size", "micro_batches", "update_frequency", "seed", "shuffle",
                 "max_steps", "val_freq", "schedule", "save_every", "drop_last", "reduce",
                 "reduce_factor", "average_optim", "max_in_flight", "deterministic", "grad_clip_norm",
                 "grad_clip_norm_type", "grad_clip_value", "autocast", "scaler_init_scale",
                 "scaler_growth_factor", "scaler_backoff_factor", "scaler_growth_interval"});
  TrainSpec t;
  if (auto v = s.integer("epochs", 1)) t.epochs = *v;
  // Bounded on its own, so that a huge value is named here rather than by what it overflows
  // later (a batch order, a dataset's size against drop_last).
  if (auto v = s.integer("batch_size", 1, kMaxBatchSize)) t.batch_size = *v;
  if (auto v = s.integer("micro_batches", 1, INT_MAX)) t.micro_batches = static_cast<int>(*v);
  if (auto v = s.integer("update_frequency", 1, INT_MAX)) t.update_frequency = static_cast<int>(*v);
  if (auto v = s.integer("seed", 0)) t.seed = *v;
  if (auto v = s.boolean("shuffle")) t.shuffle = *v;
  if (auto v = s.integer("max_steps", 1)) t.max_steps = *v;
  if (auto v = s.integer("val_freq", 0)) t.val_freq = *v;
  if (auto v = s.string("schedule")) t.schedule = choose(s, "schedule", *v, schedule_names(), "schedule");
  if (auto v = s.integer("max_in_flight", 1, INT_MAX)) {
    if (t.schedule != PipelineSchedule::kAsync) {
      s.fail("max_in_flight", "only with schedule = \"async\" (gpipe and 1f1b decide it themselves)");
    }
    t.max_in_flight = *v;
  }
  if (auto v = s.integer("save_every", 0)) t.save_every = *v;
  if (auto v = s.boolean("drop_last")) t.drop_last = *v;
  if (auto v = s.string("reduce")) t.reduce = choose(s, "reduce", *v, reduce_names(), "reduce mode");
  if (auto v = s.integer("reduce_factor", 1)) t.reduce_factor = *v;
  if (auto v = s.boolean("average_optim")) t.average_optim = *v;
  if (auto v = s.boolean("deterministic")) t.deterministic = *v;
  parse_train_knobs(s, t);
  if (t.micro_batches > t.batch_size) {
    s.fail("micro_batches", "must be <= batch_size (" + std::to_string(t.batch_size) + "), got " +
                                std::to_string(t.micro_batches));
  }
  return t;
}

DataSpec parse_data(const Section& s, const std::string& base_dir) {
  s.check_known({"format", "train", "validation", "label_column", "header", "input_shape", "scale",
                 "num_classes", "order"});
  DataSpec d;
  auto format = s.string("format");
  if (!format) s.fail("format", "missing (csv, mnist, cifar10, tensors)");
  d.format = choose(s, "format", *format, format_names(), "data format");
  auto train = path_field(s, "train", base_dir);
  if (!train) s.fail("train", "missing: the training data's path");
  d.train = *train;
  if (auto v = path_field(s, "validation", base_dir)) d.validation = *v;
  if (auto v = path_field(s, "order", base_dir)) d.order = *v;

  if (d.format != DataFormat::kCsv) {
    for (const char* key : {"label_column", "header", "input_shape", "scale"}) {
      if (s.has(key)) s.fail(key, std::string("only for format = \"csv\" (this job has \"") + *format + "\")");
    }
  } else {
    if (auto v = s.boolean("header")) d.header = *v;
    if (const toml::node* n = s.node("label_column")) {
      if (const auto* name = n->as_string()) {
        if (name->get().empty()) s.fail("label_column", "must not be empty");
        if (!d.header) {
          s.fail("label_column", "a column name needs header = true; give a 0-based column index instead");
        }
        d.label_column = name->get();
      } else if (n->as_integer()) {
        d.label_index = n->as_integer()->get();
      } else {
        s.fail("label_column", std::string("must be a column name or a 0-based index, got ") + type_name(*n));
      }
    } else if (d.header) {
      d.label_column = "label";
    }
    if (const toml::array* shape = s.array("input_shape")) {
      if (shape->empty()) s.fail("input_shape", "must not be empty");
      for (const auto& item : *shape) {
        const auto* i = item.as_integer();
        if (!i || i->get() < 1) s.fail("input_shape", "must hold positive integers, e.g. [1, 8, 8]");
        d.input_shape.push_back(i->get());
      }
    }
    if (auto v = s.number("scale")) d.scale = *v;
  }
  if (auto v = s.integer("num_classes", 1)) d.num_classes = *v;
  return d;
}

LossSpec parse_loss(const Section& s, const std::string& base_dir) {
  s.check_known({"name", "path", "reduction", "ignore_index", "class_dim"});
  LossSpec l;
  auto name = s.string("name");
  if (!name) s.fail("name", "missing (cross_entropy, nll, mse, l1, bce_with_logits, script)");
  l.name = choose(s, "name", *name, loss_names(), "loss");
  auto path = path_field(s, "path", base_dir);
  if (l.name == LossName::kScript) {
    if (!path) s.fail("path", "missing: name = \"script\" needs the TorchScript loss module's file");
    l.path = *path;
  } else if (path) {
    s.fail("path", "only for name = \"script\"");
  }
  if (auto v = s.string("reduction")) {
    if (*v != "mean") {
      s.fail("reduction", "only \"mean\" is supported (each micro-batch's mean loss is weighted by its "
                          "share of the batch), got " + in_quotes(*v));
    }
    l.reduction = *v;
  }
  const bool classes = l.name == LossName::kCrossEntropy || l.name == LossName::kNll;
  if (auto v = s.integer("ignore_index", INT64_MIN)) {
    if (!classes) s.fail("ignore_index", "only for name = \"cross_entropy\" or \"nll\"");
    l.ignore_index = *v;
  }
  if (auto v = s.integer("class_dim", -1, 1)) {
    if (!classes) s.fail("class_dim", "only for name = \"cross_entropy\" or \"nll\"");
    if (*v == 0) s.fail("class_dim", "must be 1 (PyTorch's [N, C, ...]) or -1 (the last, [N, ..., C])");
    l.class_dim = static_cast<int>(*v);
  }
  return l;
}

// The section's `betas` (Adam's and sparse Adam's), when given: two numbers, each in [0, 1).
std::optional<std::pair<double, double>> parse_betas(const Section& s) {
  const toml::array* betas = s.array("betas");
  if (!betas) return std::nullopt;
  if (betas->size() != 2) s.fail("betas", "must be two numbers [beta1, beta2], e.g. [0.9, 0.999]");
  const double b1 = s.check_number("betas", *betas->get(0), 0, false, INFINITY);
  const double b2 = s.check_number("betas", *betas->get(1), 0, false, INFINITY);
  if (b1 >= 1 || b2 >= 1) s.fail("betas", "each must be in [0, 1), got [" + format_number(b1) + ", " +
                                              format_number(b2) + "]");
  return std::make_pair(b1, b2);
}

OptimizerSpec parse_optimizer(const Section& s) {
  s.check_known({"name", "lr", "momentum", "dampening", "nesterov", "weight_decay", "betas", "eps",
                 "amsgrad", "alpha", "centered", "lr_decay", "initial_accumulator_value", "clamp_value",
                 "adam", "debias"});
  OptimizerSpec o;
  auto name = s.string("name");
  if (!name) s.fail("name", "missing (sgd, adam, adamw, rmsprop, adagrad, lamb)");
  o.name = choose(s, "name", *name, optimizer_names(), "optimizer");
  switch (o.name) {
    case OptimizerName::kSgd:
      s.check_applicable({"name", "lr", "momentum", "dampening", "nesterov", "weight_decay"}, "sgd");
      if (!s.has("lr")) s.fail("lr", "missing: sgd has no default learning rate");
      break;
    case OptimizerName::kAdam:
    case OptimizerName::kAdamW:
      s.check_applicable({"name", "lr", "betas", "eps", "weight_decay", "amsgrad"}, *name);
      o.lr = 1e-3;
      if (o.name == OptimizerName::kAdamW) o.weight_decay = 1e-2;
      break;
    case OptimizerName::kRmsprop:
      s.check_applicable({"name", "lr", "alpha", "eps", "weight_decay", "momentum", "centered"}, "rmsprop");
      o.lr = 1e-2;
      break;
    case OptimizerName::kAdagrad:
      s.check_applicable({"name", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"},
                         "adagrad");
      o.lr = 1e-2;
      o.eps = 1e-10;
      break;
    case OptimizerName::kLamb:
      // torch_optimizer.Lamb (pytorch-optimizer 0.3.0) and its defaults.
      s.check_applicable({"name", "lr", "betas", "eps", "weight_decay", "clamp_value", "adam", "debias"},
                         "lamb");
      o.lr = 1e-3;
      o.eps = 1e-6;
      s.number("lr", 0, /*exclusive=*/true);  // torch_optimizer.Lamb refuses lr = 0 too
      break;
  }
  if (auto v = s.number("lr", 0)) o.lr = *v;
  if (auto v = s.number("weight_decay", 0)) o.weight_decay = *v;
  if (auto v = s.number("momentum", 0)) o.momentum = *v;
  if (auto v = s.number("dampening", 0)) o.dampening = *v;
  if (auto v = s.boolean("nesterov")) o.nesterov = *v;
  if (auto v = s.number("eps", 0)) o.eps = *v;
  if (auto v = s.boolean("amsgrad")) o.amsgrad = *v;
  if (auto v = s.number("alpha", 0)) o.alpha = *v;
  if (auto v = s.boolean("centered")) o.centered = *v;
  if (auto v = s.number("lr_decay", 0)) o.lr_decay = *v;
  if (auto v = s.number("initial_accumulator_value", 0)) o.initial_accumulator_value = *v;
  if (auto v = s.number("clamp_value", 0)) o.clamp_value = *v;
  if (auto v = s.boolean("adam")) o.adam = *v;
  if (auto v = s.boolean("debias")) o.debias = *v;
  if (auto betas = parse_betas(s)) o.betas = *betas;
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    s.fail("nesterov", "needs momentum > 0 and dampening = 0");
  }
  return o;
}

SchedulerSpec parse_scheduler(const Section& s) {
  s.check_known({"name", "per", "step_size", "gamma", "milestones", "t_max", "eta_min", "warmup_steps",
                 "start_factor", "max_lr", "total_steps", "pct_start", "anneal_strategy", "div_factor",
                 "final_div_factor", "three_phase", "cycle_momentum", "base_momentum", "max_momentum"});
  SchedulerSpec c;
  auto name = s.string("name");
  if (!name) {
    s.fail("name", "missing (step, multistep, exponential, cosine, linear_warmup, warmup_cosine, warmup_linear, onecycle)");
  }
  c.name = choose(s, "name", *name, scheduler_names(), "scheduler");
  if (auto v = s.string("per")) c.per = choose(s, "per", *v, per_names(), "value");
  auto require = [&](const char* key, const char* what) {
    if (!s.has(key)) s.fail(key, std::string("missing: ") + *name + " needs " + what);
  };
  switch (c.name) {
    case SchedulerName::kStep:
      s.check_applicable({"name", "per", "step_size", "gamma"}, *name);
      require("step_size", "the number of steps between decays");
      break;
    case SchedulerName::kMultiStep:
      s.check_applicable({"name", "per", "milestones", "gamma"}, *name);
      require("milestones", "the steps at which to decay, e.g. [30, 80]");
      break;
    case SchedulerName::kExponential:
      s.check_applicable({"name", "per", "gamma"}, *name);
      require("gamma", "the decay factor per step");
      break;
    case SchedulerName::kCosine:
      s.check_applicable({"name", "per", "t_max", "eta_min"}, *name);
      require("t_max", "the number of steps to anneal over");
      break;
    case SchedulerName::kLinearWarmup:
      s.check_applicable({"name", "per", "warmup_steps", "start_factor"}, *name);
      require("warmup_steps", "the number of warm-up steps");
      break;
    case SchedulerName::kWarmupCosine:
      s.check_applicable({"name", "per", "warmup_steps", "start_factor", "t_max", "eta_min"}, *name);
      require("warmup_steps", "the number of warm-up steps");
      require("t_max", "the number of steps to anneal over after the warm-up");
      break;
    case SchedulerName::kWarmupLinear:
      s.check_applicable({"name", "per", "warmup_steps", "total_steps"}, *name);
      require("warmup_steps", "the number of warm-up steps (0 for none)");
      require("total_steps", "the step at which the lr reaches 0 (transformers' num_training_steps)");
      break;
    case SchedulerName::kOneCycle:
      s.check_applicable({"name", "per", "max_lr", "total_steps", "pct_start", "anneal_strategy",
                          "div_factor", "final_div_factor", "three_phase", "cycle_momentum",
                          "base_momentum", "max_momentum"}, *name);
      require("max_lr", "the peak learning rate");
      require("total_steps", "the number of steps in the cycle");
      break;
  }
  if (auto v = s.integer("step_size", 1)) c.step_size = *v;
  if (auto v = s.number("gamma", 0, true)) c.gamma = *v;
  if (auto v = s.integer("t_max", 1)) c.t_max = *v;
  if (auto v = s.number("eta_min", 0)) c.eta_min = *v;
  // transformers' get_linear_schedule_with_warmup takes num_warmup_steps = 0 (no warm-up);
  // LinearLR's total_iters (linear_warmup, warmup_cosine) is at least 1.
  if (auto v = s.integer("warmup_steps", c.name == SchedulerName::kWarmupLinear ? 0 : 1)) c.warmup_steps = *v;
  if (auto v = s.number("start_factor", 0, true, 1.0)) c.start_factor = *v;
  if (auto v = s.number("max_lr", 0, true)) c.max_lr = *v;
  if (auto v = s.integer("total_steps", 1)) c.total_steps = *v;
  if (auto v = s.number("pct_start", 0, false, 1.0)) c.pct_start = *v;
  if (auto v = s.string("anneal_strategy")) {
    c.anneal_strategy = choose(s, "anneal_strategy", *v, anneal_names(), "anneal strategy");
  }
  if (auto v = s.number("div_factor", 0, true)) c.div_factor = *v;
  if (auto v = s.number("final_div_factor", 0, true)) c.final_div_factor = *v;
  if (auto v = s.boolean("three_phase")) c.three_phase = *v;
  if (auto v = s.boolean("cycle_momentum")) c.cycle_momentum = *v;
  if (auto v = s.number("base_momentum", 0)) c.base_momentum = *v;
  if (auto v = s.number("max_momentum", 0)) c.max_momentum = *v;
  if (c.name == SchedulerName::kOneCycle) {
    // PyTorch divides by each phase's length: a phase of length 0 is a ZeroDivisionError there
    // (pct_start * total_steps = 1, or pct_start = 1), refused here before anything runs.
    const double t = static_cast<double>(c.total_steps), p = c.pct_start;
    const bool empty_phase = c.three_phase ? (p * t == 1 || t + 1 - 2 * p * t == 0)
                                           : (p * t == 1 || p == 1);
    if (empty_phase) {
      s.fail("pct_start", "pct_start * total_steps = " + format_number(p * t) +
                              " leaves a phase of the cycle empty (PyTorch divides by zero there)");
    }
  }
  if (const toml::array* milestones = s.array("milestones")) {
    if (milestones->empty()) s.fail("milestones", "must not be empty");
    for (const auto& item : *milestones) {
      const auto* i = item.as_integer();
      if (!i || i->get() < 1) s.fail("milestones", "must hold positive integers, e.g. [30, 80]");
      if (!c.milestones.empty() && i->get() <= c.milestones.back()) {
        s.fail("milestones", "must increase, got " + std::to_string(i->get()) + " after " +
                                 std::to_string(c.milestones.back()));
      }
      c.milestones.push_back(i->get());
    }
  }
  return c;
}

// [outer] (outer_spec.h). Given [train], whose keys it must agree with.
OuterSpec parse_outer(const Section& s, const TrainSpec& t, const Section& train) {
  s.check_known({"name", "lr", "momentum", "every", "H", "inner_steps"});
  OuterSpec o;
  if (auto name = s.string("name")) {
    static const std::vector<std::pair<std::string, OuterName>> names = {
        {"nesterov", OuterName::kNesterov}, {"sgd", OuterName::kSgd}};
    o.name = choose(s, "name", *name, names, "outer optimizer");
  }
  auto lr = s.number("lr", 0, /*exclusive=*/true);
  if (!lr) s.fail("lr", "missing: the outer optimizer's learning rate (DiLoCo uses 0.7)");
  o.lr = *lr;
  if (auto m = s.number("momentum", 0, false, 1)) {
    if (*m == 1) s.fail("momentum", "must be < 1, got 1");
    o.momentum = *m;
  }
  if (o.nesterov() && o.momentum == 0) {
    s.fail("momentum", "nesterov needs momentum > 0 (as torch.optim.SGD does); name = \"sgd\" for none");
  }
  int given = 0;
  for (const char* key : {"every", "H", "inner_steps"}) {
    if (auto v = s.integer(key, 1)) {
      if (given++) s.fail(key, "give H once (every, H and inner_steps are the same key)");
      o.every = *v;
    }
  }
  if (!given) s.fail("every", "missing: the optimizer updates between outer steps (H), e.g. every = 50");
  if (t.reduce == ReduceMode::kGradients) {
    s.fail("every", "with train.reduce = \"gradients\" the clusters never drift apart: "
                    "[outer] needs reduce = \"parameters\" (the default)");
  }
  if (train.has("reduce_factor")) {
    s.fail("every", "replaces train.reduce_factor: give one of them");
  }
  if (t.average_optim) {
    s.fail("every", "with train.average_optim: DiLoCo keeps each cluster's inner optimizer state its own");
  }
  return o;
}

CompressionSpec parse_compression(const Section& s) {
  s.check_known({"activations", "gradients", "rings"});
  CompressionSpec c;
  auto codec = [&](const char* key, WireCodec& out) {
    auto name = s.string(key);
    if (!name) return;
    if (!parse_wire_codec(*name, out)) {
      s.fail(key, "unknown codec " + in_quotes(*name) + " (none, fp16, bf16, int8)");
    }
  };
  codec("activations", c.activations);
  codec("gradients", c.gradients);
  codec("rings", c.rings);
  return c;
}

PsSpec parse_ps(const Section& s) {
  s.check_known({"mode", "backup", "max_staleness", "eval_freq"});
  PsSpec ps;
  ps.present = true;
  if (auto mode = s.string("mode")) {
    if (*mode == "sync") {
      ps.mode = PsMode::kSync;
    } else if (*mode == "backup") {
      ps.mode = PsMode::kBackup;
    } else if (*mode == "async") {
      ps.mode = PsMode::kAsync;
    } else {
      s.fail("mode", "unknown mode " + in_quotes(*mode) + " (sync, backup, async)");
    }
  }
  if (auto backup = s.integer("backup", 1, 1 << 20)) {
    if (ps.mode != PsMode::kBackup) s.fail("backup", "only with mode = \"backup\"");
    ps.backup = static_cast<int>(*backup);
  } else if (ps.mode == PsMode::kBackup) {
    s.fail("backup", "mode = \"backup\" needs backup = K (step on the first K workers' gradients)");
  }
  if (auto staleness = s.integer("max_staleness", 0, 1 << 20)) {
    if (ps.mode != PsMode::kAsync) s.fail("max_staleness", "only with mode = \"async\"");
    ps.max_staleness = static_cast<int>(*staleness);
  } else if (ps.mode == PsMode::kAsync) {
    s.fail("max_staleness", "mode = \"async\" needs max_staleness = N (updates a gradient may lag)");
  }
  if (auto freq = s.integer("eval_freq", 0)) ps.eval_freq = *freq;
  return ps;
}

SparseOptimizerSpec parse_sparse_optimizer(const Section& s) {
  s.check_known({"name", "lr", "betas", "eps", "lr_decay", "initial_accumulator_value",
                 "momentum", "weight_decay"});
  SparseOptimizerSpec o;
  auto name = s.string("name");
  if (!name) s.fail("name", "missing (sgd, adagrad, sparse_adam)");
  if (*name == "sgd") {
    o.name = SparseOptimizerName::kSgd;
    s.check_applicable({"name", "lr"}, "sgd on a sparse table (PyTorch applies no momentum or "
                                       "weight decay to sparse gradients lazily)");
  } else if (*name == "adagrad") {
    o.name = SparseOptimizerName::kAdagrad;
    s.check_applicable({"name", "lr", "lr_decay", "initial_accumulator_value", "eps"},
                       "adagrad on a sparse table");
    o.eps = 1e-10;
  } else if (*name == "sparse_adam") {
    o.name = SparseOptimizerName::kSparseAdam;
    s.check_applicable({"name", "lr", "betas", "eps"}, "sparse_adam");
  } else {
    s.fail("name", "unknown sparse optimizer " + in_quotes(*name) + " (sgd, adagrad, sparse_adam)");
  }
  auto lr = s.number("lr", 0, /*exclusive=*/true);
  if (!lr) s.fail("lr", "missing: a sparse optimizer has no default learning rate");
  o.lr = *lr;
  if (auto v = s.number("eps", 0, true)) o.eps = *v;
  if (auto v = s.number("lr_decay", 0)) o.lr_decay = *v;
  if (auto v = s.number("initial_accumulator_value", 0)) o.initial_accumulator_value = *v;
  if (auto betas = parse_betas(s)) o.betas = *betas;
  return o;
}

}  // namespace

namespace {

[[noreturn]] void refuse_job_size(const std::string& origin, const std::string& size) {
  throw base::ConfigError(origin + ": " + size + ", more than the " +
                    std::to_string(kMaxJobFileBytes >> 10) +
                    " KiB a job file may be (it travels to every node in one message)");
}

}  // namespace

JobSpec parse_job(const std::string& toml_text, const std::string& origin) {
  if (toml_text.size() > kMaxJobFileBytes) {
    refuse_job_size(origin, std::to_string(toml_text.size()) + " bytes");
  }
  toml::table root = base::parse_toml(toml_text, origin);
  JobSpec job;
  job.origin = origin;
  std::error_code ignored;
  fs::path absolute = fs::absolute(fs::path(origin), ignored);
  job.base_dir = absolute.parent_path().lexically_normal().string();

  static const std::vector<std::string> kTables = {"train",     "data",        "loss",
                                                   "optimizer", "scheduler", "compression",
                                                   "ps",        "sparse_optimizer", "predict", "outer"};
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (std::find(kTables.begin(), kTables.end(), name) == kTables.end()) {
      std::optional<std::string> equivalent = ravnest_equivalent(name);
      if (!equivalent) equivalent = trainer_equivalent(name);
      if (equivalent) {
        throw base::ConfigError(origin + ": " + base::printable(name, 100) + ": unknown " +
                          (value.is_table() ? "table; " : "key; ") + *equivalent);
      }
      const auto near = base::nearest_name(name, kTables);
      throw base::ConfigError(origin + ": " + base::printable(name, 100) + ": unknown " +
                        (value.is_table() ? "table" : "key") +
                        (near ? "; did you mean [" + *near + "]?" : std::string()) +
                        " (the tables are [train], [data], [loss], [optimizer], [scheduler], "
                        "[compression], [ps], [sparse_optimizer], [predict], [outer])");
    }
    if (!value.is_table()) {
      throw base::ConfigError(origin + ": " + name + ": must be a table [" + name + "], got " + type_name(value));
    }
  }
  auto section = [&](const std::string& name) {
    return Section(root.get_as<toml::table>(name), name, origin);
  };
  auto require_table = [&](const std::string& name, const std::string& example) {
    if (!root.get_as<toml::table>(name)) {
      throw base::ConfigError(origin + ": " + name + ": missing table [" + name + "] (" + example + ")");
    }
  };
  require_table("data", "format = \"csv\", train = \"train.csv\", ...");
  require_table("loss", "name = \"cross_entropy\", ...");
  require_table("optimizer", "name = \"adam\", lr = 0.001, ...");

  job.train = parse_train(section("train"));
  job.data = parse_data(section("data"), job.base_dir);
  job.loss = parse_loss(section("loss"), job.base_dir);
  job.optimizer = parse_optimizer(section("optimizer"));
  if (root.get_as<toml::table>("scheduler")) job.scheduler = parse_scheduler(section("scheduler"));
  if (job.scheduler && job.scheduler->name == SchedulerName::kOneCycle && job.scheduler->cycle_momentum &&
      job.optimizer.name == OptimizerName::kAdagrad) {
    // As PyTorch's OneCycleLR refuses it: adagrad has neither momentum nor betas to cycle.
    section("scheduler").fail("cycle_momentum", "adagrad has no momentum to cycle: set cycle_momentum = false");
  }
  job.compression = parse_compression(section("compression"));
  if (root.get_as<toml::table>("ps")) job.ps = parse_ps(section("ps"));
  if (root.get_as<toml::table>("outer")) {
    job.outer = parse_outer(section("outer"), job.train, section("train"));
    if (job.ps.present) section("outer").fail("every", "not with [ps]: a parameter server steps the model itself");
  }
  if (root.get_as<toml::table>("sparse_optimizer")) {
    job.sparse_optimizer = parse_sparse_optimizer(section("sparse_optimizer"));
  }
  if (root.get_as<toml::table>("predict")) {
    section("predict").check_known({});
    job.predict = true;
  }
  return job;
}

JobSpec load_job(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw base::ConfigError(path + ": cannot read the job file");
  // At most one byte over the limit is read: a huge file (or an endless one) is refused at once.
  std::string text(kMaxJobFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad()) throw base::ConfigError(path + ": cannot read the job file");
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > kMaxJobFileBytes) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    refuse_job_size(path, ec ? std::to_string(text.size()) + " bytes or more"
                             : std::to_string(size) + " bytes");
  }
  return parse_job(text, path);
}

const char* to_string(SparseOptimizerName name) {
  switch (name) {
    case SparseOptimizerName::kSgd: return "sgd";
    case SparseOptimizerName::kAdagrad: return "adagrad";
    case SparseOptimizerName::kSparseAdam: return "sparse_adam";
  }
  return "sgd";
}

const char* to_string(PsMode mode) {
  switch (mode) {
    case PsMode::kSync: return "sync";
    case PsMode::kBackup: return "backup";
    case PsMode::kAsync: return "async";
  }
  return "sync";
}

const char* to_string(PipelineSchedule value) { return name_of(value, schedule_names()); }

bool parse_pipeline_schedule(const std::string& name, PipelineSchedule& out) {
  for (const auto& [text, value] : schedule_names()) {
    if (text == name) {
      out = value;
      return true;
    }
  }
  return false;
}
const char* to_string(ReduceMode value) { return name_of(value, reduce_names()); }
const char* to_string(DataFormat value) { return name_of(value, format_names()); }
const char* to_string(LossName value) { return name_of(value, loss_names()); }
const char* to_string(OptimizerName value) { return name_of(value, optimizer_names()); }
const char* to_string(SchedulerName value) { return name_of(value, scheduler_names()); }
const char* to_string(SchedulerPer value) { return name_of(value, per_names()); }
const char* to_string(AnnealStrategy value) { return name_of(value, anneal_names()); }

}  // namespace ravnest::config
