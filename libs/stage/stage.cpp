#include "libs/stage/stage.h"

namespace ravnest::stage {

std::vector<at::Tensor> Stage::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& p : named_parameters()) out.push_back(std::move(p.value));
  return out;
}

std::vector<at::Tensor> Stage::buffers() const {
  std::vector<at::Tensor> out;
  for (auto& b : named_buffers()) out.push_back(std::move(b.value));
  return out;
}

}  // namespace ravnest::stage
