// read_tensors(): tensors saved with torch.save (dataset.h).
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"
#include "libs/graph/torch_errors.h"

namespace ravnest::data {
namespace {

using detail::fail;

std::string kind_of(const c10::IValue& value) { return value.tagKind(); }

std::vector<at::Tensor> tensors_of(const c10::IValue& value, const std::string& path) {
  std::vector<at::Tensor> out;
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) {
      if (!item.isTensor()) fail(path, "the inputs hold a " + kind_of(item) + ", expected tensors");
      out.push_back(item.toTensor());
    }
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) {
      if (!item.isTensor()) fail(path, "the inputs hold a " + kind_of(item) + ", expected tensors");
      out.push_back(item.toTensor());
    }
  } else {
    fail(path, "the inputs are a " + kind_of(value) + ", expected a tensor or a tuple of tensors");
  }
  if (out.empty()) fail(path, "the inputs are an empty tuple");
  return out;
}

}  // namespace

Dataset read_tensors(const std::string& path) {
  const std::string bytes = read_maybe_gzip(path);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    fail(path, "not a file saved with torch.save that LibTorch can read (" + graph::torch_message(e) +
                   "); save a tuple (inputs, labels) or a dict {\"inputs\": ..., \"labels\": ...} "
                   "(LibTorch cannot unpickle one-element lists or dicts)");
  }
  c10::IValue inputs, labels;
  if (value.isTuple() || value.isList()) {
    std::vector<c10::IValue> items;
    if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements()) items.push_back(item);
    } else {
      for (const auto& item : value.toListRef()) items.push_back(item);
    }
    if (items.size() != 2) {
      fail(path, "holds a tuple of " + std::to_string(items.size()) + " items, expected (inputs, labels)");
    }
    inputs = items[0];
    labels = items[1];
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) fail(path, "the dict's keys must be \"inputs\" and \"labels\"");
      const std::string key = entry.key().toStringRef();
      if (key == "inputs") {
        inputs = entry.value();
      } else if (key == "labels") {
        labels = entry.value();
      } else {
        fail(path, "unexpected key \"" + key + "\" in the dict (expected \"inputs\" and \"labels\")");
      }
    }
    if (inputs.isNone()) fail(path, "the dict has no \"inputs\"");
    if (labels.isNone()) fail(path, "the dict has no \"labels\"");
  } else {
    fail(path, "holds a " + kind_of(value) + ", expected a tuple (inputs, labels) or a dict "
               "{\"inputs\": ..., \"labels\": ...}");
  }
  if (!labels.isTensor()) fail(path, "the labels are a " + kind_of(labels) + ", expected a tensor");
  at::Tensor y = labels.toTensor().detach().contiguous();
  if (y.dim() == 0) fail(path, "the labels are a scalar, expected one row per sample");
  std::vector<at::Tensor> x = tensors_of(inputs, path);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = x[i].detach().contiguous();
    if (x[i].dim() == 0 || x[i].size(0) != y.size(0)) {
      fail(path, (x.size() == 1 ? std::string("the inputs have ") : "input " + std::to_string(i) + " has ") +
                     (x[i].dim() ? std::to_string(x[i].size(0)) : std::string("no")) + " rows but there are " +
                     std::to_string(y.size(0)) + " labels");
    }
  }
  if (y.size(0) == 0) fail(path, "empty dataset (no samples)");
  return Dataset(std::move(x), y, path);
}

}  // namespace ravnest::data
