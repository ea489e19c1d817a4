#include "tests/support/digits.h"

#include <limits>
#include <stdexcept>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/base/atomic_file.h"

namespace ravnest::test {


std::map<std::string, at::Tensor> load_state_dict(const std::filesystem::path& path) {
  const std::string text = base::read_file(path.string());
  std::vector<char> bytes(text.begin(), text.end());
  auto dict = torch::jit::pickle_load(bytes).toGenericDict();
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

double largest_difference(const std::map<std::string, at::Tensor>& a,
                          const std::map<std::string, at::Tensor>& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, tensor] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      *where = "missing " + name;
      return std::numeric_limits<double>::infinity();
    }
    const double diff =
        (tensor.to(at::kDouble) - it->second.to(at::kDouble)).abs().max().item<double>();
    if (diff > worst) {
      worst = diff;
      *where = name;
    }
  }
  return worst;
}

}  // namespace ravnest::test
