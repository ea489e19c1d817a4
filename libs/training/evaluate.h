// Evaluation of a whole model on a dataset: mean loss and accuracy, in eval mode, without grad.
#pragma once

#include <cstdint>

#include <torch/csrc/jit/api/module.h>

#include "libs/data/dataset.h"
#include "libs/training/loss.h"

namespace ravnest::training {

struct Evaluation {
  double loss = 0;        // mean over the samples (each batch's mean loss weighted by its size)
  double accuracy = 0;    // NaN when not a classification (see count_correct)
  int64_t samples = 0;
};

// The number of samples whose argmax over dim 1 of the output (Loss::primary_output) equals the
// label. Against labels with positions ([N, C, H, W] and [N, H, W]: segmentation, tagging) each
// sample counts the share of its positions that are right, so that the sum over samples divided
// by the samples is pixel accuracy. -1 when the labels are not integers of the output's shape
// without dim 1 (regression, probabilities).
double count_correct(const c10::IValue& model_output, const at::Tensor& labels);

// Runs the dataset in order in batches of `batch_size`; the module is put in eval mode and
// back into the mode it was in.
Evaluation evaluate(torch::jit::Module& module, const data::Dataset& dataset, const Loss& loss,
                    int64_t batch_size);

}  // namespace ravnest::training
