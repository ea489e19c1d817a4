// A traced model's training-mode flags made to follow each module's `training` attribute again.
//
// torch.jit.trace records one run: the mode it ran in becomes constants in the code. A model
// traced after model.train() computes `dropout(x, p, True)`, `batch_norm(..., True, ...)` and
// BatchNorm's `num_batches_tracked.add_(1)` whatever its `training` says, so evaluating it
// (validation, evaluate, predict, the fused model) ran in training mode and validation changed
// BatchNorm's buffers. follow_training_flag rewrites every method of the module and its
// submodules as scripting writes them: the mode argument of the dropout family
// (dropout, feature_dropout, alpha_dropout, feature_alpha_dropout, in place or not),
// batch_norm's `training` and instance_norm's `use_input_stats` (those two only where running
// statistics are kept: without them both always use the batch's) become
// `self.training` of the method's own module, and `self.num_batches_tracked.add_(...)` runs
// under `if self.training:`.
//
// The rule, documented in docs/python.md: a mode flag in a traced method belongs to the module
// whose method holds it (F.dropout(x, training=self.training) in a model's forward follows the
// model's flag; nn.Dropout's follows the Dropout's). A deliberate always-on dropout in a traced
// model (Monte Carlo dropout) is not expressible; a scripted model is never rewritten.
//
// Which files are traced: those whose archive holds the extra record kTracedRecord
// (python/ravnest writes it when it traces; a user's own trace: torch.jit.save(traced, path,
// _extra_files={"ravnest/traced": "torch.jit.trace"})). load_module (module_file.h) applies the
// rewrite to them, so clusterize's stages, verify, evaluate, predict and fuse all see it.
//
// Idempotent (a rewritten method holds no constant flag and no unguarded add_). Runs on the
// caller's thread before the module first runs (its methods' optimized graphs are made from the
// rewritten ones lazily). Throws nothing of its own.
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace ravnest::torch_support {

// The extra record (torch.jit.save's _extra_files key) that marks a traced model.
inline constexpr const char* kTracedRecord = "ravnest/traced";

// How many flags and add_ calls were rewritten (0 when the module holds none).
size_t follow_training_flag(torch::jit::Module& module);

}  // namespace ravnest::torch_support
