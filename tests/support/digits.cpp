#include "tests/support/digits.h"

#include <stdexcept>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/atomic_file.h"

namespace ravnest::test {


std::map<std::string, at::Tensor> load_state_dict(const std::filesystem::path& path) {
  const std::string text = config::read_file(path.string());
  std::vector<char> bytes(text.begin(), text.end());
  auto dict = torch::jit::pickle_load(bytes).toGenericDict();
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

}  // namespace ravnest::test
