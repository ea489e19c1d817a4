// Evaluation of a whole model on a dataset: mean loss and accuracy, in eval mode, without grad.
#pragma once

#include <cstdint>

#include "libs/stage/stage.h"

#include "libs/data/dataset.h"
#include "libs/training/loss.h"

namespace ravnest::training {

struct Evaluation {
  // The mean loss: over the samples (each batch's mean loss weighted by its size), or over the
  // labels that count when the loss ignores some (counted_labels).
  double loss = 0;
  double accuracy = 0;    // NaN when not a classification (see count_correct): print nothing
  int64_t samples = 0;
};

// Answers right and answers asked: the argmax over the class dimension of the output
// (Loss::primary_output; class_dimension: dim 1, or the last for [N, T, V] logits against
// [N, T] labels) against integer labels, over the labels not equal to spec.ignore_index: one a
// sample for [N] labels, one a position for [N, d1, ...] (pixel accuracy for segmentation, token
// accuracy for a language model). `asked` is -1 when the labels are not integers of the output's
// shape without its class dimension (regression, probabilities): there is no accuracy. The loss
// need not be a classification loss (a script loss gets an accuracy too).
struct Correct {
  int64_t right = 0;
  int64_t asked = -1;
};
Correct count_correct(const c10::IValue& model_output, const at::Tensor& labels,
                      const config::LossSpec& spec);

// Runs the dataset in order in batches of `batch_size`; the module is put in eval mode and
// back into the mode it was in.
Evaluation evaluate(stage::Stage& module, const data::Dataset& dataset, const Loss& loss,
                    int64_t batch_size);

}  // namespace ravnest::training
