#include "tests/support/digits.h"

#include <stdexcept>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/atomic_file.h"
#include "tests/support/test_env.h"

namespace ravnest::test {

const std::filesystem::path& digits_dir() {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    auto result = run_command(python() + " " + source_dir() + "/examples/digits/make_data.py --out " +
                              dir.path().string());
    if (result.exit_code != 0) {
      throw std::runtime_error("make_data.py failed: " + result.out + result.err);
    }
    made = true;
  }
  return dir.path();
}

std::string digits_model() { return (digits_dir() / "small_cnn.pt").string(); }

std::map<std::string, at::Tensor> load_state_dict(const std::filesystem::path& path) {
  const std::string text = config::read_file(path.string());
  std::vector<char> bytes(text.begin(), text.end());
  auto dict = torch::jit::pickle_load(bytes).toGenericDict();
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

}  // namespace ravnest::test
