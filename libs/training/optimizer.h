// The job's [optimizer] as a LibTorch optimizer (SGD, Adam, AdamW, RMSprop, Adagrad, and
// torch_optimizer's Lamb: lamb.h).
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/stage/stage.h"

namespace ravnest::training {

// The parameters to optimize: each tensor once (tied weights appear twice in a TorchScript
// module's parameters(); identity is the TensorImpl), without those with requires_grad false,
// in their first order.
std::vector<at::Tensor> unique_trainable(const std::vector<at::Tensor>& parameters);

// The parameters `node`'s optimizer takes from its stage, in the stage's order: all of them but a
// hybrid trainer's embedding tables (the servers optimize those: NodeMetadata's sparse_tables).
std::vector<at::Tensor> optimized_parameters(const stage::Stage& stage,
                                             const config::NodeMetadata& node);

// An optimizer over unique_trainable(parameters) with the spec's options (PyTorch's defaults
// for the ones the job does not set). All parameters form one param group.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimizerSpec& spec,
                                                        const std::vector<at::Tensor>& parameters);

// The optimizer's state for one parameter (momentum buffer, Adam's moments, ...), for averaging
// across clusters; empty before the first step. Step counters are not included: they are equal.
std::vector<at::Tensor> optimizer_state_tensors(torch::optim::Optimizer& optimizer,
                                                const at::Tensor& parameter);

// [train] grad_clip_value, then grad_clip_norm (grad_clip.h), on the gradients the optimizer
// steps, in its order: the whole model's in one process (the reference trainers; no autocast
// there: they run float32).
void clip_as_job_says(const config::TrainSpec& train, torch::optim::Optimizer& optimizer);

}  // namespace ravnest::training
