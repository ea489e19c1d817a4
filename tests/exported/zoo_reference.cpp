#include "tests/exported/zoo_reference.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <torch/csrc/autograd/autograd.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "tests/support/test_env.h"

// LibTorch's logging defines a CHECK of its own (c10/util/logging_is_not_google_glog.h), which
// aborts; Catch2's is the one meant here.
#undef CHECK
#include <catch2/catch.hpp>

namespace ravnest::test {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<at::Tensor> tensors(const c10::IValue& list) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toTensor());
  return out;
}

std::map<std::string, at::Tensor> named(const c10::IValue& dict) {
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict.toGenericDict()) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

}  // namespace

std::string zoo(const std::string& file) {
  return (std::filesystem::path(binary_dir()) / "pt2_zoo" / file).string();
}

const std::vector<std::string>& zoo_models() {
  static const std::vector<std::string> models = {
      "cnn", "encoder", "lstm", "multi_io", "mutated_buffer", "dropout", "tied", "constants", "gpt",
      "resnet18"};
  return models;
}

ZooReference zoo_reference(const std::string& name) {
  const std::string bytes = read_bytes(zoo(name + ".ref.pt"));
  REQUIRE(!bytes.empty());
  const c10::IValue value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  ZooReference r;
  for (const auto& entry : value.toGenericDict()) {
    const std::string key = entry.key().toStringRef();
    if (key == "inputs") {
      for (const at::Tensor& t : tensors(entry.value())) r.inputs.emplace_back(t);
    } else if (key == "grad_outputs") {
      r.grad_outputs = tensors(entry.value());
    } else if (key == "seed") {
      r.seed = entry.value().toInt();
    } else if (key == "outputs") {
      r.outputs = tensors(entry.value());
    } else if (key == "grads") {
      r.grads = named(entry.value());
    } else if (key == "buffers") {
      r.buffers = named(entry.value());
    } else if (key == "eval_outputs") {
      r.eval_outputs = tensors(entry.value());
    }
  }
  return r;
}

void check_equal(const at::Tensor& ours, const at::Tensor& eager, const std::string& what) {
  INFO(what);
  REQUIRE(ours.sizes() == eager.sizes());
  REQUIRE(ours.scalar_type() == eager.scalar_type());
  const bool equal = at::equal(ours, eager);
  if (!equal && ours.is_floating_point()) {
    INFO("max |difference| " << (ours - eager).abs().max().item<double>());
    CHECK(equal);
  } else {
    CHECK(equal);
  }
}

ModelUnderTest under_test(exported::ExportedModule& module) {
  return {[&](const std::vector<c10::IValue>& inputs) { return module.forward(inputs); },
          [&] { return module.named_parameters(); },
          [&] { return module.named_buffers(); },
          [&](bool on) { module.train(on); },
          [&] { return module.is_training(); }};
}

void check_against_eager(const std::string& name, const ModelUnderTest& model) {
  INFO("model " << name);
  const ZooReference ref = zoo_reference(name);
  CHECK(model.is_training());

  torch::manual_seed(static_cast<uint64_t>(ref.seed));
  const std::vector<c10::IValue> outputs = model.forward(ref.inputs);
  REQUIRE(outputs.size() == ref.outputs.size());
  std::vector<at::Tensor> roots, grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor out = outputs[i].toTensor();
    check_equal(out, ref.outputs[i], "output " + std::to_string(i));
    if (ref.grad_outputs[i].numel() > 0) {
      roots.push_back(out);
      grads.push_back(ref.grad_outputs[i]);
    }
  }
  torch::autograd::backward(roots, grads);

  std::map<std::string, at::Tensor> parameters;
  for (const auto& [n, p] : model.named_parameters()) {
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    parameters[n] = p;
  }
  REQUIRE(parameters.size() == ref.grads.size());
  for (const auto& [n, grad] : ref.grads) {
    INFO("parameter " << n);
    REQUIRE(parameters.count(n));
    REQUIRE(parameters[n].grad().defined());
    check_equal(parameters[n].grad(), grad, "gradient of " + n);
  }
  std::map<std::string, at::Tensor> buffers;
  for (const auto& [n, b] : model.named_buffers()) buffers[n] = b;
  REQUIRE(buffers.size() == ref.buffers.size());
  for (const auto& [n, b] : ref.buffers) {
    REQUIRE(buffers.count(n));
    check_equal(buffers[n], b, "buffer " + n + " after the training forward");
  }

  model.train(false);
  CHECK_FALSE(model.is_training());
  const std::vector<c10::IValue> eval_outputs = model.forward(ref.inputs);
  for (size_t i = 0; i < eval_outputs.size(); ++i) {
    check_equal(eval_outputs[i].toTensor(), ref.eval_outputs[i], "eval output " + std::to_string(i));
  }
  // model.eval() leaves the buffers as they were (BatchNorm's statistics and step count).
  for (const auto& [n, b] : ref.buffers) {
    if (n.find("num_batches_tracked") != std::string::npos || n.find("running_") != std::string::npos) {
      check_equal(buffers[n], b, "buffer " + n + " after the eval forward");
    }
  }
}

}  // namespace ravnest::test
