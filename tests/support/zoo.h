// The test zoo (tests/models/export_models.py) as training tests use it: a model's files, and
// how far trained tensors are from a reference.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::test {

struct ModelFiles {
  std::string model;                        // NAME.pt in RAVNEST_TEST_MODELS
  std::vector<std::string> example_inputs;  // specs for the plan
  std::string train_file;                   // NAME.json: "train": {"file", "loss"}
  std::string loss;
};

ModelFiles model_files(const std::string& name);

struct StateDifference {
  double worst = 0;  // largest absolute difference of any tensor (INFINITY: one is missing)
  std::string name;  // where
  double moved = 0;  // largest change of any reference tensor from the initial weights
};

// Every reference tensor against each trained copy of it (a tensor held by several stages has
// several), by state-dict name.
StateDifference compare_state(const std::multimap<std::string, at::Tensor>& trained,
                              const std::map<std::string, at::Tensor>& reference,
                              const std::map<std::string, at::Tensor>& initial);

}  // namespace ravnest::test
