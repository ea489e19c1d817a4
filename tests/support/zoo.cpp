#include "tests/support/zoo.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/support/test_env.h"

namespace ravnest::test {

ModelFiles model_files(const std::string& name) {
  ModelFiles files;
  files.model = models_dir() + "/" + name + ".pt";
  const auto meta = nlohmann::json::parse(read_text(models_dir() + "/" + name + ".json"));
  for (const auto& spec : meta.at("inputs")) {
    std::string text = spec.get<std::string>();
    if (text.find("int64") != std::string::npos) text += ":2";  // any index the model accepts
    files.example_inputs.push_back(text);
  }
  files.train_file = models_dir() + "/" + meta.at("train").at("file").get<std::string>();
  files.loss = meta.at("train").at("loss").get<std::string>();
  return files;
}

StateDifference compare_state(const std::multimap<std::string, at::Tensor>& trained,
                              const std::map<std::string, at::Tensor>& reference,
                              const std::map<std::string, at::Tensor>& initial) {
  StateDifference d;
  for (const auto& [name, tensor] : reference) {
    auto [begin, end] = trained.equal_range(name);
    if (begin == end) return {INFINITY, name + " (missing)", d.moved};
    const auto b = tensor.to(at::kDouble);
    for (auto it = begin; it != end; ++it) {
      // Equal entries count 0, infinities too: a causal mask's -inf minus -inf is NaN, which
      // the next tensor's difference used to overwrite. A real NaN stays the worst.
      const auto a = it->second.to(at::kDouble);
      const double diff = (a - b).abs().masked_fill_(a == b, 0).max().item<double>();
      if (std::isnan(d.worst)) continue;
      if (!(diff <= d.worst)) {
        d.worst = diff;
        d.name = name;
      }
    }
    auto before = initial.find(name);
    if (before != initial.end() && tensor.is_floating_point()) {
      d.moved = std::max(d.moved, (tensor.to(at::kDouble) - before->second.to(at::kDouble))
                                      .abs().max().item<double>());
    }
  }
  return d;
}

}  // namespace ravnest::test
