#include "libs/config/job/outer_spec.h"

namespace ravnest::config {

const char* to_string(OuterName name) { return name == OuterName::kSgd ? "sgd" : "nesterov"; }

}  // namespace ravnest::config
