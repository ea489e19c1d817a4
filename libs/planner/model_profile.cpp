#include "libs/planner/model_profile.h"

namespace ravnest::planner {

int64_t ModelProfile::total_parameter_bytes() const {
  int64_t total = 0;
  for (const auto& unit : units) total += unit.parameter_bytes;
  return total;
}

int64_t ModelProfile::total_trainable_bytes() const {
  int64_t total = 0;
  for (const auto& unit : units) total += unit.trainable_bytes;
  return total;
}

}  // namespace ravnest::planner
