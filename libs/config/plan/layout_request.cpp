#include "libs/config/plan/layout_request.h"

#include <toml++/toml.h>

#include "libs/base/config_error.h"
#include "libs/base/atomic_file.h"
#include "libs/base/toml_error.h"

namespace ravnest::config {

LayoutRequest parse_layout_request(const std::string& text, const std::string& origin) {
  toml::table table = base::parse_toml(text, origin);
  LayoutRequest request;
  const toml::node* plan = table.get("plan");
  if (!plan) {
    throw base::ConfigError(origin + ": plan: missing (a [plan] block with stages = K and/or "
                            "clusters = C)");
  }
  if (!plan->is_table()) throw base::ConfigError(origin + ": plan: must be a table ([plan])");
  for (const auto& [key, value] : *plan->as_table()) {
    const std::string name(key.str());
    int* field = name == "stages" ? &request.stages : name == "clusters" ? &request.clusters : nullptr;
    if (!field) {
      const std::string hint = name == "num_stages"    ? " (DeepSpeed's num_stages is stages here)"
                               : name == "world_size"  ? " (set clusters, the copies of the model)"
                                                       : " (plan takes stages and clusters)";
      throw base::ConfigError(origin + ": plan." + name + ": unknown key" + hint);
    }
    const auto number = value.value<int64_t>();
    if (!value.is_integer() || !number || *number < 1 || *number > 1000000) {
      throw base::ConfigError(origin + ": plan." + name +
                              ": must be a whole number from 1 to 1000000");
    }
    *field = static_cast<int>(*number);
  }
  return request;
}

LayoutRequest load_layout_request(const std::string& path) {
  return parse_layout_request(base::read_file(path), path);
}

}  // namespace ravnest::config
