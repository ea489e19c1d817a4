// Reading and comparing fused state dicts in tests (the digits data itself: test_env.h).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "tests/support/test_env.h"

namespace ravnest::test {

// A state dict saved by `ravnest fuse` (or torch.save of a plain dict), by name.
std::map<std::string, at::Tensor> load_state_dict(const std::filesystem::path& path);

// The largest absolute difference between tensors of the same name, every name of `a` (infinity
// when `b` lacks one); `where` gets the name.
double largest_difference(const std::map<std::string, at::Tensor>& a,
                          const std::map<std::string, at::Tensor>& b, std::string* where);

}  // namespace ravnest::test
