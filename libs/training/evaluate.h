// Evaluation of a whole model on a dataset: mean loss and accuracy, in eval mode, without grad.
#pragma once

#include <cstdint>

#include <torch/csrc/jit/api/module.h>

#include "libs/data/dataset.h"
#include "libs/training/loss.h"

namespace ravnest::runtime {

struct Evaluation {
  double loss = 0;        // mean over the samples (each batch's mean loss weighted by its size)
  double accuracy = 0;    // NaN when not a classification (see count_correct)
  int64_t samples = 0;
};

// The number of samples whose argmax over dim 1 of the output (the first tensor of a tuple)
// equals the label, or -1 when the output is not 2-D [N, C] or the labels are not integers [N].
int64_t count_correct(const c10::IValue& model_output, const at::Tensor& labels);

// Runs the dataset in order in batches of `batch_size`; the module is put in eval mode and
// back into the mode it was in.
Evaluation evaluate(torch::jit::Module& module, const data::Dataset& dataset, const Loss& loss,
                    int64_t batch_size);

}  // namespace ravnest::runtime
