#include "libs/training/predictions.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/torch_support/torch_load_file.h"

namespace ravnest::training {

c10::IValue join_predictions(const std::vector<c10::IValue>& outputs) {
  if (outputs.empty()) throw std::runtime_error("no prediction to join");
  const c10::IValue& first = outputs.front();
  if (first.isTensor()) {
    std::vector<at::Tensor> parts;
    for (const auto& o : outputs) {
      if (!o.isTensor()) throw std::runtime_error("the model's outputs change type between batches");
      parts.push_back(o.toTensor());
    }
    if (parts.front().dim() == 0) return at::stack(parts);  // one value per micro-batch
    return at::cat(parts);
  }
  if (first.isTuple() || first.isList()) {
    auto items_of = [](const c10::IValue& v) {
      std::vector<c10::IValue> items;
      if (v.isTuple()) {
        for (const auto& item : v.toTupleRef().elements()) items.push_back(item);
      } else if (v.isList()) {
        for (const c10::IValue item : v.toList()) items.push_back(item);
      } else {
        throw std::runtime_error("the model's outputs change type between batches");
      }
      return items;
    };
    const size_t n = items_of(first).size();
    std::vector<std::vector<c10::IValue>> columns(n);
    for (const auto& o : outputs) {
      auto items = items_of(o);
      if (items.size() != n) {
        throw std::runtime_error("the model returns " + std::to_string(n) + " values, then " +
                                 std::to_string(items.size()));
      }
      for (size_t i = 0; i < n; ++i) columns[i].push_back(std::move(items[i]));
    }
    std::vector<c10::IValue> joined;
    for (auto& column : columns) joined.push_back(join_predictions(column));
    if (first.isTuple()) return c10::ivalue::Tuple::create(std::move(joined));
    c10::impl::GenericList list(c10::AnyType::get());
    for (auto& j : joined) list.push_back(std::move(j));
    return list;
  }
  if (first.isGenericDict()) {
    const auto keys = first.toGenericDict();
    c10::impl::GenericDict joined(keys.keyType(), keys.valueType());
    for (const auto& key : keys) {
      std::vector<c10::IValue> column;
      for (const auto& o : outputs) {
        if (!o.isGenericDict() || o.toGenericDict().size() != keys.size() ||
            !o.toGenericDict().contains(key.key())) {
          throw std::runtime_error("the model's outputs change keys between batches");
        }
        column.push_back(o.toGenericDict().at(key.key()));
      }
      joined.insert(key.key(), join_predictions(column));
    }
    return joined;
  }
  throw std::runtime_error(std::string("the model returns a ") + first.tagKind() +
                           ", which predictions.pt cannot join (tensors, tuples, lists or dicts "
                           "of them)");
}

std::string predictions_file(const c10::IValue& value) {
  return torch_support::torch_load_file(value);
}

c10::IValue predict_in_process(stage::Stage& model, const data::Dataset& data,
                               int64_t batch_size) {
  if (data.size() == 0) throw std::runtime_error("the data to predict on holds no sample");
  if (batch_size < 1) throw std::runtime_error("the batch size must be at least 1");
  model.eval();
  torch::NoGradGuard no_grad;
  std::vector<c10::IValue> outputs;
  for (int64_t start = 0; start < data.size(); start += batch_size) {
    auto batch = data.get_range(start, std::min(batch_size, data.size() - start));
    std::vector<c10::IValue> args(batch.inputs.begin(), batch.inputs.end());
    outputs.push_back(model.forward(args));
  }
  return join_predictions(outputs);
}

}  // namespace ravnest::training
