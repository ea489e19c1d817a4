// Predictions: a model's outputs for every sample of a dataset, in order, as `ravnest predict`
// writes them (docs/predict.md): joined along the first dimension and saved in torch.save's
// format, which torch.load reads in Python. The pipeline's leaf (libs/worker/pipeline/stage_predictor.h)
// and the one-process path share these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "libs/data/dataset.h"
#include "libs/stage/stage.h"

namespace ravnest::training {

// The outputs of consecutive batches joined along the first dimension: tensors, or tuples (or
// lists) of tensors joined element by element. Throws std::runtime_error when they do not line
// up (another type, another number of elements) or hold something else.
c10::IValue join_predictions(const std::vector<c10::IValue>& outputs);

// The bytes of predictions.pt for `value` (torch::jit::pickle_save).
std::string predictions_file(const c10::IValue& value);

// `model` in eval mode without autograd over `data` in order, `batch_size` samples at a time:
// what the pipeline's prediction equals. Any format (stage::Stage: TorchScript, .pt2).
c10::IValue predict_in_process(stage::Stage& model, const data::Dataset& data,
                               int64_t batch_size);

}  // namespace ravnest::training
