#include "libs/graph/example_input.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

namespace {

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("--example-input '" + spec + "': " + why);
}

int64_t parse_positive(const std::string& spec, const std::string& text, const char* what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    bad_spec(spec, std::string(what) + " '" + text + "' is not a positive integer");
  }
  int64_t value = std::stoll(text);
  if (value <= 0) bad_spec(spec, std::string(what) + " must be positive");
  return value;
}

at::ScalarType parse_dtype(const std::string& spec, const std::string& name) {
  static const std::pair<const char*, at::ScalarType> kTypes[] = {
      {"float32", at::kFloat}, {"float", at::kFloat},  {"float64", at::kDouble},
      {"double", at::kDouble}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},    {"long", at::kLong},    {"int32", at::kInt},
      {"int", at::kInt},       {"int16", at::kShort},  {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  for (const auto& [text, type] : kTypes) {
    if (name == text) return type;
  }
  bad_spec(spec, "unknown dtype '" + name + "' (float32, float64, int64, int32, uint8, bool, ...)");
}

std::vector<at::Tensor> load_saved(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_spec(path, "cannot read the file");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    // LibTorch's unpickler lacks the opcode Python uses for one-element lists.
    bad_spec(path, "not a tensor or tuple of tensors saved with torch.save (" +
                       torch_support::torch_message(e) + "; save a tuple rather than a list)");
  }
  std::vector<at::Tensor> tensors;
  auto add = [&](const c10::IValue& item) {
    if (!item.isTensor()) bad_spec(path, "holds a " + item.tagKind() + ", not a tensor");
    tensors.push_back(item.toTensor());
  };
  if (value.isTensor()) {
    add(value);
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) add(item);
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) add(item);
  } else {
    bad_spec(path, "holds a " + value.tagKind() + ", not a tensor or a list of tensors");
  }
  return tensors;
}

}  // namespace

std::vector<at::Tensor> make_example_inputs(const std::vector<std::string>& specs,
                                            uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> inputs;
  for (const auto& spec : specs) {
    if (spec.find(".pt") != std::string::npos || std::filesystem::exists(spec)) {
      for (auto& t : load_saved(spec)) inputs.push_back(std::move(t));
      continue;
    }
    std::vector<std::string> fields;
    for (size_t start = 0;;) {
      size_t colon = spec.find(':', start);
      fields.push_back(spec.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    if (fields.size() > 3) bad_spec(spec, "expected SHAPE[:DTYPE[:HIGH]]");
    std::vector<int64_t> shape;
    for (size_t start = 0;;) {
      size_t x = fields[0].find('x', start);
      shape.push_back(parse_positive(spec, fields[0].substr(start, x - start), "dimension"));
      if (x == std::string::npos) break;
      start = x + 1;
    }
    at::ScalarType dtype = fields.size() > 1 ? parse_dtype(spec, fields[1]) : at::kFloat;
    auto options = at::TensorOptions().dtype(dtype);
    if (at::isFloatingType(dtype) && fields.size() > 2) {
      bad_spec(spec, "HIGH applies to integer dtypes only");
    }
    const int64_t high = fields.size() > 2 ? parse_positive(spec, fields[2], "HIGH") : 10;
    int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
    for (int64_t d : shape) {
      if (__builtin_mul_overflow(bytes, d, &bytes)) bad_spec(spec, "the tensor's size overflows");
    }
    // Profiling needs a batch, not a dataset; and past this a machine that overcommits memory
    // would be killed filling it rather than refuse it.
    constexpr int64_t kMaxExampleBytes = int64_t{4} << 30;
    if (bytes > kMaxExampleBytes) {
      bad_spec(spec, std::to_string(bytes) + " bytes, more than an example batch may take (4 GiB)");
    }
    try {
      if (at::isFloatingType(dtype)) {
        inputs.push_back(at::normal(0.0, 1.0, shape, generator, at::TensorOptions()).to(dtype));
      } else if (dtype == at::kBool) {
        inputs.push_back(at::randint(0, 2, shape, generator, options));
      } else {
        inputs.push_back(at::randint(0, high, shape, generator, options));
      }
    } catch (const c10::Error& e) {
      bad_spec(spec, "cannot make a tensor of " + std::to_string(bytes) + " bytes (" +
                         torch_support::torch_message(e) + ")");
    }
  }
  return inputs;
}

}  // namespace ravnest::graph
