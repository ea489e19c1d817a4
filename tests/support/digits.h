// The digits example for integration tests: sklearn's digits as CSVs and the small CNN, made once
// per test binary by examples/digits/make_data.py; and reading a fused state dict.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace ravnest::test {

const std::filesystem::path& digits_dir();  // digits_train.csv, digits_val.csv, small_cnn.pt
std::string digits_model();                 // digits_dir() / small_cnn.pt

// A state dict saved by `ravnest fuse` (or torch.save of a plain dict), by name.
std::map<std::string, at::Tensor> load_state_dict(const std::filesystem::path& path);

}  // namespace ravnest::test
